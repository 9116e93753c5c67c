// Package seam builds sqlc's queries on the database error seam
// (choirsql.Interpreted): every error they return is one of
// choirsql.Interpret's named errors. It is the one way choird builds them
// (layout_test.go refuses db.New and agentdb.New elsewhere). It is apart
// from package sql so that choirctl, which migrates through sql, links no
// generated queries.
package seam

import (
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/db/agentdb"
	choirsql "github.com/choirhq/choir/sql"
)

// Queries is the control schema's sqlc queries on d (a pool, a connection
// or a transaction), through the seam.
func Queries(d choirsql.DBTX) *db.Queries { return db.New(choirsql.Interpreted(d)) }

// AgentQueries is an agent schema's sqlc queries on d, through the seam.
func AgentQueries(d choirsql.DBTX) *agentdb.Queries { return agentdb.New(choirsql.Interpreted(d)) }
