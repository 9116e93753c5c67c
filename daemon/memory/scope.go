package memory

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/sql/seam"
)

// AgentScope confines a transaction to one agent's memory schema until
// Leave: unqualified table names resolve in choir_<agent_id>, and when a
// role agent is given, every statement runs with the privileges of that
// agent's role, so Postgres refuses anything outside that agent's own
// schema.
type AgentScope struct {
	tx       pgx.Tx
	previous string
}

// EnterAgentScope puts the schema of schemaAgent first on search_path for
// the rest of tx (SET LOCAL semantics) and, unless roleAgent is empty,
// switches to roleAgent's role. Own-agent work passes the same agent twice;
// choird's reads of another agent's memory and operator commands pass an
// empty roleAgent and keep choird's role.
func EnterAgentScope(ctx context.Context, tx pgx.Tx, schemaAgent, roleAgent string) (*AgentScope, error) {
	for _, id := range []string{schemaAgent, roleAgent} {
		if id != "" && !config.ValidName(id) {
			return nil, fmt.Errorf("invalid agent id %q: want %s", id, config.NamePattern)
		}
	}
	role := "none"
	if roleAgent != "" {
		role = config.SchemaName(roleAgent)
	}
	q := seam.Queries(tx)
	row, err := q.MemoryScopeEnter(ctx, db.MemoryScopeEnterParams{
		SearchPath: config.SchemaName(schemaAgent) + ", public", Role: role})
	if err != nil {
		return nil, fmt.Errorf("enter memory schema of agent %s: %w", schemaAgent, err)
	}
	if roleAgent != "" && roleAgent != schemaAgent {
		if err := q.MemoryScopeCheck(ctx, config.SchemaName(schemaAgent)); err != nil {
			return nil, fmt.Errorf("agent %s in the memory of agent %s: %w", roleAgent, schemaAgent, err)
		}
	}
	return &AgentScope{tx: tx, previous: row.PreviousSearchPath}, nil
}

// Leave restores choird's role and the previous search_path.
func (s *AgentScope) Leave(ctx context.Context) error {
	if err := seam.Queries(s.tx).MemoryScopeLeave(ctx, s.previous); err != nil {
		return fmt.Errorf("leave memory schema: %w", err)
	}
	return nil
}
