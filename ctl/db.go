package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
	choirsql "github.com/choirhq/choir/sql"
)

func newDBCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "db", Short: "Manage Choir's Postgres database"}
	cmd.AddCommand(newDBMigrateCommand(g))
	return cmd
}

type dbMigrateOptions struct {
	action      string
	databaseURL string
	to          int64
	toSet       bool
	json        bool
}

func newDBMigrateCommand(g *globals) *cobra.Command {
	var opts dbMigrateOptions
	cmd := &cobra.Command{
		Use:   "migrate [up|down|status|version|redo]",
		Short: "Apply or inspect the schema migrations (Choir's tables and River's)",
		Long: `Apply or inspect the schema migrations.

  up       apply every pending migration (the default), or up to --to
  down     roll back the latest migration, or down to --to (--to 0 removes everything)
  status   list every migration and whether it is applied
  version  print the current and latest schema version
  redo     roll back the latest migration and apply it again

The database comes from --database-url, else CHOIR_DATABASE_URL, else
config.json's "postgres" block and its secret.`,
		Args:      cobra.MatchAll(cobra.MaximumNArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"up", "down", "status", "version", "redo"},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.action = "up"
			if len(args) == 1 {
				opts.action = args[0]
			}
			opts.toSet = cmd.Flags().Changed("to")
			return runDBMigrate(cmd.Context(), g, opts)
		},
	}
	cmd.Flags().StringVar(&opts.databaseURL, "database-url", "", "Postgres URL (env CHOIR_DATABASE_URL); overrides config.json")
	cmd.Flags().Int64Var(&opts.to, "to", 0, "target version for up or down")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print results as JSON")
	return cmd
}

// databaseDSN resolves the connection string and names where it came from.
func databaseDSN(g *globals, flagURL string) (dsn, origin string, err error) {
	if flagURL != "" {
		return flagURL, "--database-url", nil
	}
	if u := os.Getenv("CHOIR_DATABASE_URL"); u != "" {
		return u, "CHOIR_DATABASE_URL", nil
	}
	cfg, secrets, err := config.Load(g.home)
	if err != nil {
		return "", "", usageErr(fmt.Errorf("no --database-url or CHOIR_DATABASE_URL, and %w", err))
	}
	dsn, err = cfg.PostgresDSN(secrets)
	if err != nil {
		return "", "", usageErr(err)
	}
	return dsn, "config.json postgres.host/postgres.port", nil
}

func runDBMigrate(ctx context.Context, g *globals, opts dbMigrateOptions) error {
	dsn, origin, err := databaseDSN(g, opts.databaseURL)
	if err != nil {
		return err
	}
	pool, err := choirsql.Connect(ctx, dsn, choirsql.ConnectOptions{Origin: origin, MaxConns: 4})
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := choirsql.NewMigrator(pool, g.logger(slog.LevelWarn))
	if err != nil {
		return err
	}
	defer m.Close()

	var results []choirsql.Result
	switch opts.action {
	case "up":
		if opts.toSet {
			results, err = m.UpTo(ctx, opts.to)
		} else {
			results, err = m.Up(ctx)
		}
	case "down":
		if opts.toSet {
			results, err = m.DownTo(ctx, opts.to)
		} else {
			results, err = m.Down(ctx)
		}
	case "redo":
		results, err = m.Redo(ctx)
	case "status":
		st, err := m.Status(ctx)
		if err != nil {
			return err
		}
		return printStatus(g.stdout, st, opts.json)
	case "version":
		cur, latest, err := m.Version(ctx)
		if err != nil {
			return err
		}
		if opts.json {
			return writeJSON(g.stdout, map[string]int64{"current": cur, "latest": latest})
		}
		fmt.Fprintf(g.stdout, "schema version %d of %d\n", cur, latest)
		return nil
	}
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(g.stdout, results)
	}
	if len(results) == 0 {
		fmt.Fprintln(g.stdout, "nothing to migrate: the schema is up to date")
	}
	for _, r := range results {
		verb := "applied"
		if opts.action == "down" {
			verb = "rolled back"
		}
		fmt.Fprintf(g.stdout, "%s %s (%s)\n", verb, r.Source, r.Duration)
	}
	cur, latest, err := m.Version(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "schema version %d of %d\n", cur, latest)
	return nil
}

func printStatus(w io.Writer, st []choirsql.Status, asJSON bool) error {
	if asJSON {
		return writeJSON(w, st)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tMIGRATION\tAPPLIED")
	for _, s := range st {
		applied := "pending"
		if s.Applied {
			applied = s.AppliedAt
			if applied == "" {
				applied = "yes"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strconv.FormatInt(s.Version, 10), s.Source, applied)
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
