package ctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/modelenv"
	"github.com/choirhq/choir/config/starter"
)

type initOptions struct {
	local      bool
	pgHost     string
	pgPort     int
	pgDatabase string
}

func newInitCommand(g *globals) *cobra.Command {
	var opts initOptions
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create the .choir.d directory with a skeleton config.json and secrets.json",
		Long: `Create the .choir.d directory: config.json, secrets.json (mode 0600),
repos/, socks/ and logs/. It never overwrites an existing setup.

Without --local, config.json holds placeholders to fill in. With --local it
is a complete configuration for this machine: the throwaway Postgres of
scripts/devpg.sh, one workspace, a console DM, the offline embedder and one
agent, so choird runs at once.

The agent's model is a real one when the environment names it, first found:
  CHOIR_LLM_URL, CHOIR_LLM_MODEL and CHOIR_LLM_KEY  any OpenAI-compatible endpoint
  OPENAI_API_KEY      https://api.openai.com/v1, gpt-4o-mini
  OPENROUTER_API_KEY  https://openrouter.ai/api/v1, openai/gpt-4o-mini
(CHOIR_LLM_MODEL also replaces the model of the last two). The key goes into
secrets.json, as openai-api-key, openrouter-api-key or choir-llm-key, never
into config.json. Otherwise the model is a local Ollama endpoint,
http://127.0.0.1:11434/v1, and choird says at start when nothing answers there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runInit(g, opts) },
	}
	cmd.Flags().BoolVar(&opts.local, "local", false, "write a complete local configuration instead of placeholders")
	cmd.Flags().StringVar(&opts.pgHost, "pg-host", "127.0.0.1", "Postgres host for --local")
	cmd.Flags().IntVar(&opts.pgPort, "pg-port", 55432, "Postgres port for --local")
	cmd.Flags().StringVar(&opts.pgDatabase, "pg-database", "choir", "Postgres database for --local")
	return cmd
}

// ErrAlreadySetUp is returned by init when .choir.d already holds a setup.
var ErrAlreadySetUp = errors.New("choir is already set up here")

func runInit(g *globals, opts initOptions) error {
	home, err := filepath.Abs(g.home)
	if err != nil {
		return err
	}
	for _, name := range []string{"config.json", "secrets.json"} {
		if _, err := os.Stat(filepath.Join(home, name)); err == nil {
			return fmt.Errorf("%w: %s exists; refusing to overwrite it (edit it, or remove %s to start over)",
				ErrAlreadySetUp, filepath.Join(home, name), home)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("check %s: %w", name, err)
		}
	}
	for _, dir := range []string{"", "repos/global", "repos/agents", "socks", "logs/archive"} {
		if err := os.MkdirAll(filepath.Join(home, dir), 0o700); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Join(home, dir), err)
		}
	}

	var cfg *config.Config
	secrets := config.Secrets{}
	envModel, haveModel, err := modelenv.ModelFromEnv(os.Getenv)
	if err != nil && opts.local {
		return usageErr(err)
	}
	if opts.local {
		cfg, secrets = starter.Local(home, config.Postgres{Host: opts.pgHost, Port: opts.pgPort, Database: opts.pgDatabase})
		// A local install gets the web console (choirctl console logs in).
		cfg.Console = &config.Console{Listen: config.DefaultConsoleListen}
		if haveModel {
			modelenv.UseModel(cfg, secrets, envModel)
		}
		for _, ws := range cfg.Workspaces {
			if err := os.MkdirAll(ws.Path, 0o755); err != nil {
				return fmt.Errorf("create workspace %s: %w", ws.Path, err)
			}
		}
	} else {
		cfg = starter.Skeleton()
	}
	if err := config.WriteFiles(home, cfg, secrets, false); err != nil {
		return err
	}

	fmt.Fprintf(g.stdout, "created %s\n", home)
	if opts.local {
		fmt.Fprintf(g.stdout, `
This is a complete local configuration: Postgres at %s:%d (database %s),
the offline embedder, a console DM, one agent, "assistant", and the web
console on %s (choirctl console prints a link to log in).
%s
Next:
  choirctl --home %s db migrate
  choird --home %s
`, opts.pgHost, opts.pgPort, opts.pgDatabase, config.DefaultConsoleListen, modelNote(envModel, haveModel), home, home)
		return nil
	}
	fmt.Fprintf(g.stdout, `
Next steps:
  1. Postgres: make sure the database named in config.json "postgres" exists
     and has pgvector (scripts/devpg.sh start gives a throwaway one), then set
     its credentials as "user:password":
       choirctl secret set postgres-admin   (or edit %[1]s/secrets.json, mode 0600)
  2. Fill in config.json: at least one workspace, one model, one gateway bot
     with its token secret, one DM, and one agent whose defaults name them.
  3. Check it:           choirctl --home %[1]s config validate
  4. Create the schema:  choirctl --home %[1]s db migrate
  5. Start the daemon:   choird --home %[1]s
choird creates each agent's memory schema on its first start.
`, home)
	return nil
}

// modelNote says which model init --local chose, and where it came from.
func modelNote(m modelenv.EnvModel, ok bool) string {
	if !ok {
		return "The model is a local Ollama endpoint (http://127.0.0.1:11434/v1, llama3.1). For a real\n" +
			"one, " + modelenv.ModelEnvHelp + ".\n"
	}
	where := ""
	if m.Model.Secret != "" {
		where = ", its key in secrets.json as " + m.Model.Secret
	}
	return fmt.Sprintf("The model is %s at %s (from %s%s).\n", m.Model.Model, m.Model.Endpoint, m.From, where)
}
