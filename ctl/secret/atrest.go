package secret

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/atrest"
)

func newSecretEncryptCommand(env Env) *cobra.Command {
	return &cobra.Command{Use: "encrypt", Short: "Encrypt a plaintext secrets.json at rest with age",
		Long: "Encrypt secrets.json in place with age. The identity is the systemd credential " + atrest.CredentialName +
			"\n($CREDENTIALS_DIRECTORY), else the key file $" + atrest.KeyFileEnv + " or .choir.d/" + atrest.KeyFileName +
			"; when there is none,\na new key is generated into that file (mode 0600). Keep a copy of the key apart from secrets.json:\n" +
			"without it the secrets cannot be read.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runSecretEncrypt(env) }}
}

func newSecretRotateCommand(env Env) *cobra.Command {
	return &cobra.Command{Use: "rotate", Short: "Rotate the age key of an encrypted secrets.json",
		Long: "Generate a new age key in the key file and re-encrypt secrets.json to it (and to .choir.d/" +
			atrest.RecipientsFileName + ", if any).\nA crash at any point leaves a key that reads secrets.json. " +
			"It does not change the secrets' values:\nif the old key leaked with a copy of secrets.json, replace them too " +
			"(choirctl secret set).",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runSecretRotate(env) }}
}

// runSecretEncrypt replaces a plaintext secrets.json with its encryption,
// generating a key file when no identity exists.
func runSecretEncrypt(env Env) error {
	unlock, err := lockHome(env.Home())
	if err != nil {
		return err
	}
	defer unlock()
	path := filepath.Join(env.Home(), config.SecretsFile)
	res, err := config.EncryptSecretsFile(env.Home())
	switch {
	case err != nil:
		return err
	case res.Already:
		fmt.Fprintf(env.Stdout, "%s is already age-encrypted; nothing changed\n", path)
		return nil
	case res.Generated:
		fmt.Fprintf(env.Stdout, "generated a new age key in %s (mode 0600): keep a copy of it apart from secrets.json\n", res.Key.Path)
	}
	fmt.Fprintf(env.Stdout, "encrypted %s (%d secrets) with the %s; the plaintext file was replaced and its content overwritten\n",
		path, res.Secrets, res.Key)
	fmt.Fprintln(env.Stdout, "copies made before (backups, snapshots) still hold the values in plaintext")
	return nil
}

// runSecretRotate generates a new key and re-encrypts secrets.json to it.
func runSecretRotate(env Env) error {
	unlock, err := lockHome(env.Home())
	if err != nil {
		return err
	}
	defer unlock()
	secrets, key, err := env.readSecrets(env.Home())
	if err != nil {
		return err
	}
	path := filepath.Join(env.Home(), config.SecretsFile)
	if key == nil {
		return env.UsageErr(fmt.Errorf("%s is not encrypted, so it has no key to rotate; encrypt it with: choirctl secret encrypt", path))
	}
	plain, err := secretsJSON(secrets)
	if err != nil {
		return err
	}
	next, err := atrest.Rotate(env.Home(), key, path, plain)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "rotated the age key in %s and re-encrypted %s to it; the previous key is gone from the file\n",
		next.Path, path)
	fmt.Fprintln(env.Stdout, "replace copies of the old key (backups) with the new one; choird reads it at its next secret apply or start")
	return nil
}
