package sql

import (
	"context"
	stdsql "database/sql"
	"fmt"
	"strings"

	"github.com/pressly/goose/v3"
)

// PartsMigrationVersion is the goose version of the Go migration that
// brings a database provisioned before agent_schema_parts to it.
const PartsMigrationVersion = 42

// The provisioning section of 00004_agent_schema.sql: provision_agent's one
// definition, its base part and the parts registry.
const (
	partsFile         = "00004_agent_schema.sql"
	partsSectionBegin = "-- provisioning: begin"
	partsSectionEnd   = "-- provisioning: end"
)

// partsMigration is migration 42. Until it, migrations 00010 and 00026
// rewrote provision_agent whole to add their objects; they now register
// parts of the schema instead (agent_schema_parts), and provision_agent
// is defined once, in 00004. A database those migrations reached before
// that change has the last whole function and no registry: this runs the
// provisioning section of 00004 on it, from the embedded file itself so
// that the function is not copied, and registers the parts 00010 and
// 00026 add. On any other database it does nothing; its down does nothing
// either, since every down from here on unregisters what its up
// registered.
func partsMigration() *goose.Migration {
	return goose.NewGoMigration(PartsMigrationVersion,
		&goose.GoFunc{RunTx: adoptSchemaParts},
		&goose.GoFunc{RunTx: func(context.Context, *stdsql.Tx) error { return nil }},
	)
}

func adoptSchemaParts(ctx context.Context, tx *stdsql.Tx) error {
	var has bool
	if err := tx.QueryRowContext(ctx,
		"SELECT to_regclass('choir_control.agent_schema_parts') IS NOT NULL").Scan(&has); err != nil {
		return fmt.Errorf("look for agent_schema_parts: %w", err)
	}
	if has {
		return nil
	}
	section, err := provisioningSection()
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, section); err != nil {
		return fmt.Errorf("define provision_agent and its parts (%s): %w", partsFile, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO choir_control.agent_schema_parts (part, position, fn)
		VALUES ('memory', 20, 'choir_control.agent_schema_objects(text,int)'),
		       ('text', 30, 'choir_control.agent_schema_text_objects(text)')
		ON CONFLICT (part) DO NOTHING`); err != nil {
		return fmt.Errorf("register the memory and text parts: %w", err)
	}
	return nil
}

// provisioningSection is the text of 00004 between its provisioning
// markers.
func provisioningSection() (string, error) {
	b, err := migrations.ReadFile(partsFile)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", partsFile, err)
	}
	_, rest, ok := strings.Cut(string(b), partsSectionBegin)
	_, rest, _ = strings.Cut(rest, "\n") // the rest of the marker's line
	section, _, ok2 := strings.Cut(rest, partsSectionEnd)
	if !ok || !ok2 {
		return "", fmt.Errorf("%s has no provisioning section (%q ... %q)", partsFile, partsSectionBegin, partsSectionEnd)
	}
	return section, nil
}
