package ctl

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
)

func newConfigCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect and validate .choir.d/config.json"}
	cmd.AddCommand(newConfigValidateCommand(g))
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
	var cerr *config.Error
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
