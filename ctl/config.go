package ctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/strictjson"
)

func newConfigCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Validate config.json; load, diff and apply it to choird (two-phase)"}
	cmd.AddCommand(newConfigValidateCommand(g))
	var asJSON bool
	// Each command prints choird's own rendering of its result, the text
	// the gateway shows too, or the result as JSON.
	emit := func(v fmt.Stringer) error {
		if asJSON {
			return writeJSON(g.stdout, v)
		}
		_, err := fmt.Fprintln(g.stdout, v.String())
		return err
	}
	load := &cobra.Command{Use: "load", Args: cobra.NoArgs,
		Short: "Read .choir.d/ and fetch its repos in choird, validate all, stage it or nothing; show the diff",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.ConfigLoad(cmd.Context())
			if err != nil {
				return err
			}
			return emit(out)
		}}
	diff := &cobra.Command{Use: "diff", Args: cobra.NoArgs,
		Short: "Show the staged config against the running one, and when each change takes effect",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.ConfigDiff(cmd.Context())
			if err != nil {
				return err
			}
			return emit(out)
		}}
	apply := &cobra.Command{Use: "apply", Args: cobra.NoArgs,
		Short: "Make the staged config the running one and have running agents fetch it",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.ConfigApply(cmd.Context())
			if err != nil {
				return err
			}
			return emit(out)
		}}
	show := &cobra.Command{Use: "show", Args: cobra.NoArgs,
		Short: "Show the config choird runs with (secret names only, never values)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.ConfigShow(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			var buf bytes.Buffer
			if err := json.Indent(&buf, out.Config, "", "  "); err != nil {
				return fmt.Errorf("config show: %w", err)
			}
			fmt.Fprintf(g.stdout, "# running config version %d\n%s\n", out.ConfigVersion, buf.Bytes())
			return nil
		}}
	for _, c := range []*cobra.Command{load, diff, apply, show} {
		c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
		cmd.AddCommand(c)
	}
	return cmd
}

type configValidateOptions struct {
	json bool
}

func newConfigValidateCommand(g *globals) *cobra.Command {
	var opts configValidateOptions
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check config.json and secrets.json; report every problem with its JSON path",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runConfigValidate(g, opts) },
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	return cmd
}

// configProblem is one problem in --json output.
type configProblem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func runConfigValidate(g *globals, opts configValidateOptions) error {
	cfg, secrets, err := config.Load(g.home)
	var problems []configProblem
	var cerr *strictjson.Error
	if errors.As(err, &cerr) {
		for _, p := range cerr.Problems {
			problems = append(problems, configProblem{Path: p.Path, Message: p.Message})
		}
	}
	if opts.json {
		out := struct {
			Valid    bool            `json:"valid"`
			Problems []configProblem `json:"problems"`
			Error    string          `json:"error,omitempty"`
		}{Valid: err == nil, Problems: problems}
		if out.Problems == nil {
			out.Problems = []configProblem{}
		}
		if err != nil && cerr == nil {
			out.Error = err.Error()
		}
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		if e := enc.Encode(out); e != nil {
			return e
		}
		if err != nil {
			return &exitError{code: ExitUsage, err: fmt.Errorf("config is invalid")}
		}
		return nil
	}
	if err != nil {
		return usageErr(err)
	}
	fmt.Fprintf(g.stdout, "config is valid: %d agents, %d workspaces, %d models, %d gateways, %d DMs, %d secrets\n",
		len(cfg.Agents), len(cfg.Workspaces), len(cfg.Models), len(cfg.Gateways), len(cfg.DMs), len(secrets))
	return nil
}
