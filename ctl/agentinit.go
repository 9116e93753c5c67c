package ctl

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
)

type agentInitOptions struct {
	repoDir string
}

// newAgentInitCommand is `choirctl agent init` (spec 17.8). It edits
// config.json directly, so choird need not run; choird picks the agent up
// when it next reads its configuration.
func newAgentInitCommand(g *globals) *cobra.Command {
	var opts agentInitOptions
	cmd := &cobra.Command{
		Use:   "init <agent-id>",
		Short: "Add an agent to config.json with placeholders, and scaffold its git repo",
		Long: `Add an agent to config.json with placeholder defaults to fill in (workspace,
llm and dm are required), and, with --repo-dir, create a bare git repo there
scaffolded with a Dockerfile, identity/SOUL.md, identity/SOUL-CORE.md and
empty tools/ and skills/. Without --repo-dir, create the repo yourself and
set agents.<id>.repo.url. Nothing is built or started.`,
		Args: cobra.ExactArgs(1),
		// A new agent's id: none of the configured ones.
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              func(cmd *cobra.Command, args []string) error { return runAgentInit(g, args[0], opts) },
	}
	cmd.Flags().StringVar(&opts.repoDir, "repo-dir", "", "create the agent's bare git repo in this directory")
	return cmd
}

func runAgentInit(g *globals, id string, opts agentInitOptions) error {
	if !config.ValidName(id) {
		return usageErr(fmt.Errorf("agent id %q: want %s (it becomes a Postgres schema and role name)", id, config.NamePattern))
	}
	path := filepath.Join(g.home, config.ConfigFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w (run choirctl init first)", path, err)
	}
	cfg, err := config.Parse(raw)
	if err != nil {
		return usageErr(err)
	}
	if _, ok := cfg.Agents[id]; ok {
		return fmt.Errorf("agent %s is already in %s", id, path)
	}
	agent := config.Agent{Repo: config.Repo{URL: "", Ref: "main"}}
	if opts.repoDir != "" {
		dir, err := filepath.Abs(opts.repoDir)
		if err != nil {
			return err
		}
		if err := scaffoldRepo(dir, id); err != nil {
			return err
		}
		agent.Repo.URL = "file://" + dir
	}
	if cfg.Agents == nil {
		cfg.Agents = map[string]config.Agent{}
	}
	cfg.Agents[id] = agent
	b, err := cfg.MarshalIndent()
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "added agent %s to %s\n", id, path)
	if agent.Repo.URL != "" {
		fmt.Fprintf(g.stdout, "created its repo at %s\n", agent.Repo.URL)
	} else {
		fmt.Fprintf(g.stdout, "create its git repo and set agents.%s.repo.url\n", id)
	}
	fmt.Fprintf(g.stdout, "fill in agents.%s.defaults (workspace, llm and dm are required), then:\n"+
		"  choirctl config validate\n  choirctl agent build %s\n  choirctl agent start %s\n", id, id, id)
	return nil
}

// scaffoldRepo creates a bare repo at dir whose main branch holds the
// per-agent skeleton of spec 6.5.
func scaffoldRepo(dir, id string) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists; choose another --repo-dir", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	work, err := os.MkdirTemp("", "choir-agent-init-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	files := map[string]string{
		"Dockerfile":            "# Agent " + id + ": agent-specific system packages and tool builds.\nARG CHOIR_BASE_IMAGE\nFROM ${CHOIR_BASE_IMAGE}\n",
		"identity/SOUL.md":      "# " + id + "\nDescribe how this agent talks with you.\n",
		"identity/SOUL-CORE.md": "# " + id + " (core)\nDescribe how this agent works through deep tasks.\n",
		"tools/.gitkeep":        "",
		"skills/.gitkeep":       "",
	}
	for name, data := range files {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			return err
		}
	}
	git := func(dir string, args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=choirctl", "GIT_AUTHOR_EMAIL=choirctl@localhost",
			"GIT_COMMITTER_NAME=choirctl", "GIT_COMMITTER_EMAIL=choirctl@localhost")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %w: %s", args, err, out)
		}
		return nil
	}
	if err := git(filepath.Dir(dir), "init", "-q", "--bare", "-b", "main", dir); err != nil {
		return err
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "Scaffold agent " + id},
		{"push", "-q", dir, "main"}} {
		if err := git(work, args...); err != nil {
			return err
		}
	}
	return nil
}
