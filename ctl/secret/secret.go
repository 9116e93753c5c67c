// Package secret is choirctl secret: list, set and delete the secrets of
// secrets.json (edited in place under choirctl's lock, encrypted again
// when the file is age-encrypted, refused when config.json would break),
// encrypt the file at rest and rotate its key, and apply it to choird and
// the running agents.
package secret

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/atrest"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/strictjson"
)

// Env is what the secret commands take from choirctl.
type Env struct {
	// Home is --home, read when the command runs.
	Home     func() string
	Client   func() *admin.Client
	Stdout   io.Writer
	UsageErr func(error) error
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// maxSecretBytes bounds a secret value read from stdin.
const maxSecretBytes = 64 << 10

func Command(env Env) *cobra.Command {
	cmd := &cobra.Command{Use: "secret", Short: "List, set and delete secrets; encrypt secrets.json at rest; apply it to choird and the running agents"}
	apply := &cobra.Command{Use: "apply", Short: "Reload secrets.json in choird and have every running agent refresh its secrets",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := env.Client()
			defer c.Close()
			out, err := c.SecretApply(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "applied %d secrets; %d running agents refreshing\n", out.Secrets, out.Notified)
			return nil
		}}

	var asJSON bool
	list := &cobra.Command{Use: "list", Short: "List the names of the secrets choird runs with (never their values)",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := env.Client()
			defer c.Close()
			names, err := c.SecretList(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(env.Stdout, names)
			}
			for _, n := range names {
				fmt.Fprintln(env.Stdout, n)
			}
			return nil
		}}
	list.Flags().BoolVar(&asJSON, "json", false, "print the names as a JSON array")

	set := &cobra.Command{Use: "set <name> [value|-]",
		Short: "Set a secret in secrets.json; without a value, or with -, read it from stdin",
		Long: "Set a secret in secrets.json (mode 0600, replaced atomically; an age-encrypted file is decrypted in memory\n" +
			"and stays encrypted). The value is read from stdin when\n" +
			"it is omitted or -, which keeps it out of shell history: printf %s \"$TOKEN\" | choirctl secret set name\n" +
			"choird and running agents use it after: choirctl secret apply",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var value string
			if len(args) == 2 && args[1] != "-" {
				value = args[1]
			} else {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxSecretBytes+1))
				if err != nil {
					return fmt.Errorf("read the secret from stdin: %w", err)
				}
				if len(b) > maxSecretBytes {
					return env.UsageErr(fmt.Errorf("secret value on stdin is over %d bytes", maxSecretBytes))
				}
				// One trailing newline is how echo and most editors end
				// a line, never part of a token.
				b = bytes.TrimSuffix(b, []byte("\n"))
				b = bytes.TrimSuffix(b, []byte("\r"))
				value = string(b)
			}
			return runSecretSet(env, args[0], value)
		}}

	del := &cobra.Command{Use: "delete <name>", Aliases: []string{"rm"}, Short: "Delete a secret from secrets.json",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runSecretDelete(env, args[0]) }}

	cmd.AddCommand(list, set, del, apply, newSecretEncryptCommand(env), newSecretRotateCommand(env))
	return cmd
}

func runSecretSet(env Env, name, value string) error {
	if value == "" {
		return env.UsageErr(fmt.Errorf("the value of secret %s is empty; to remove it run: choirctl secret delete %s", name, name))
	}
	return editSecrets(env, func(s config.Secrets) (string, error) {
		old, exists := s[name]
		if !exists && !config.ValidName(name) {
			return "", env.UsageErr(fmt.Errorf("secret name %q must match %s", name, config.NamePattern))
		}
		s[name] = value
		switch {
		case !exists:
			return "added secret " + name, nil
		case old == value:
			return "secret " + name + " unchanged (same value)", nil
		}
		return "updated secret " + name, nil
	})
}

func runSecretDelete(env Env, name string) error {
	return editSecrets(env, func(s config.Secrets) (string, error) {
		if _, ok := s[name]; !ok {
			return "", env.UsageErr(fmt.Errorf("secret %s is not in secrets.json (secrets: %v)", name, s.Names()))
		}
		delete(s, name)
		return "deleted secret " + name, nil
	})
}

// editSecrets changes secrets.json under an exclusive lock on the .choir.d
// directory, so two edits never lose one another, and replaces the file
// atomically with mode 0600. An age-encrypted file is decrypted in memory
// and written encrypted again, to the same key: no plaintext reaches the
// disk. An edit that would break config.json (a secret it names deleted, a
// Postgres secret not of the form user:password) is refused and changes
// nothing; problems config.json already had are only mentioned.
func editSecrets(env Env, edit func(config.Secrets) (string, error)) error {
	unlock, err := lockHome(env.Home())
	if err != nil {
		return err
	}
	defer unlock()

	path := filepath.Join(env.Home(), config.SecretsFile)
	secrets, key, err := env.readSecrets(env.Home())
	if err != nil {
		return err
	}
	before := maps.Clone(secrets)
	what, err := edit(secrets)
	if err != nil {
		return err
	}

	// Validate the result: it must read back as secrets.json, and must
	// not add a problem to config.json.
	data, err := secretsJSON(secrets)
	if err != nil {
		return err
	}
	if _, err := config.ParseSecrets(data); err != nil {
		return fmt.Errorf("the edited secrets.json would not parse, nothing changed: %w", err)
	}
	remaining, err := env.checkConfigWith(env.Home(), before, secrets)
	if err != nil {
		return err
	}
	stored := ""
	if key != nil {
		if data, err = config.EncryptSecrets(env.Home(), secrets, key); err != nil {
			return err
		}
		stored = ", age-encrypted"
	}
	if err := config.WriteFileAtomic(path, data, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "%s in %s (%d secrets%s)\n", what, path, len(secrets), stored)
	if remaining > 0 {
		fmt.Fprintf(env.Stdout, "config.json still has %d problems; see: choirctl config validate\n", remaining)
	}
	fmt.Fprintln(env.Stdout, "to use it in choird and running agents, run: choirctl secret apply")
	return nil
}

// lockHome takes an exclusive lock on the .choir.d directory, which every
// edit of secrets.json holds.
func lockHome(home string) (unlock func(), err error) {
	dir, err := os.Open(home)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w (run choirctl init to create it)", home, err)
	}
	if err := syscall.Flock(int(dir.Fd()), syscall.LOCK_EX); err != nil {
		dir.Close()
		return nil, fmt.Errorf("lock %s: %w", home, err)
	}
	return func() {
		syscall.Flock(int(dir.Fd()), syscall.LOCK_UN) //nolint:errcheck
		dir.Close()
	}, nil
}

// checkConfigWith refuses an edit that adds a problem to config.json, and
// counts the problems it still has.
func (env Env) checkConfigWith(home string, before, after config.Secrets) (remaining int, err error) {
	cfgData, err := os.ReadFile(filepath.Join(home, config.ConfigFile))
	if err != nil {
		return 0, nil
	}
	cfg, err := config.Parse(cfgData)
	if err != nil {
		return 0, nil
	}
	was := problemSet(cfg.Validate(before))
	var introduced []string
	for _, p := range problemList(cfg.Validate(after)) {
		if !was[p] {
			introduced = append(introduced, p)
		}
		remaining++
	}
	if len(introduced) > 0 {
		msg := "refused, secrets.json unchanged: config.json would become invalid:"
		for _, p := range introduced {
			msg += "\n  " + p
		}
		return 0, env.UsageErr(errors.New(msg))
	}
	return remaining, nil
}

// secretsJSON renders secrets.json's plaintext.
func secretsJSON(s config.Secrets) ([]byte, error) {
	data, err := json.MarshalIndent(map[string]string(s), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode secrets: %w", err)
	}
	return append(data, '\n'), nil
}

// readSecrets reads home's secrets.json, refusing one that other users can
// read or write, as choird does, and decrypting one that is age-encrypted;
// key is then the identity that decrypted it. A missing file is an empty
// set.
func (env Env) readSecrets(home string) (s config.Secrets, key *atrest.Key, err error) {
	path := filepath.Join(home, config.SecretsFile)
	data, err := config.ReadSecretsFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return config.Secrets{}, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if data, key, err = config.DecryptSecrets(home, data); err != nil {
		return nil, nil, err
	}
	if s, err = config.ParseSecrets(data); err != nil {
		return nil, nil, env.UsageErr(fmt.Errorf("parse %s (fix it by hand first):\n%w", path, err))
	}
	return s, key, nil
}

func problemList(err error) []string {
	var cerr *strictjson.Error
	if !errors.As(err, &cerr) {
		return nil
	}
	out := make([]string, 0, len(cerr.Problems))
	for _, p := range cerr.Problems {
		out = append(out, p.String())
	}
	return out
}

func problemSet(err error) map[string]bool {
	m := map[string]bool{}
	for _, p := range problemList(err) {
		m[p] = true
	}
	return m
}
