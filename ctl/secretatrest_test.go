package ctl_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/atrest"
	"github.com/choirhq/choir/dbtest"
)

// canary is a secret value no file may hold in plaintext.
const canary = "canary-9d41e7-never-on-disk"

// plaintextFiles lists the files under dir that hold canary.
func plaintextFiles(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil // a temporary file renamed away meanwhile
		}
		if data, err := os.ReadFile(p); err == nil && bytes.Contains(data, []byte(canary)) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// decryptHome reads home's secrets.json with home's key file.
func decryptHome(t *testing.T, home string) config.Secrets {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(home, config.SecretsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !atrest.IsEncrypted(data) {
		t.Fatalf("secrets.json is not encrypted:\n%s", data)
	}
	key, err := atrest.ReadKey(filepath.Join(home, atrest.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := atrest.Decrypt(data, key)
	if err != nil {
		t.Fatal(err)
	}
	s, err := config.ParseSecrets(plain)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// encryptedHome is a home whose secrets.json holds the canary, then is
// encrypted with a key generated into home/age.key.
func encryptedHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	localInit(t, home, dbtest.DefaultURL)
	if r := run(t, "--home", home, "secret", "set", "canary", canary); r.code != 0 {
		t.Fatalf("set: %s", r.stderr)
	}
	r := run(t, "--home", home, "secret", "encrypt")
	if r.code != 0 || !strings.Contains(r.stdout, "generated a new age key in "+filepath.Join(home, "age.key")) {
		t.Fatalf("encrypt: %d %s %s", r.code, r.stdout, r.stderr)
	}
	return home
}

func TestSecretsAtRest(t *testing.T) {
	t.Parallel()

	t.Run("EncryptLeavesNoPlaintextAndAKeyOnlyItsOwnerReads", func(t *testing.T) {
		t.Parallel()
		home := encryptedHome(t)
		if found := plaintextFiles(t, home); len(found) > 0 {
			t.Errorf("plaintext canary in %v", found)
		}
		for _, name := range []string{"age.key", "secrets.json"} {
			if st, err := os.Stat(filepath.Join(home, name)); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v %v, want mode 0600", name, st, err)
			}
		}
		if s := decryptHome(t, home); s["canary"] != canary || s["postgres-admin"] != "postgres:" {
			t.Errorf("decrypted secrets: %v", s.Names())
		}
		if r := run(t, "--home", home, "secret", "encrypt"); r.code != 0 || !strings.Contains(r.stdout, "already age-encrypted") {
			t.Errorf("second encrypt: %d %s %s", r.code, r.stdout, r.stderr)
		}
		if r := run(t, "--home", home, "config", "validate"); r.code != 0 {
			t.Errorf("config validate on the encrypted file: %s", r.stderr)
		}
	})

	t.Run("SetAndRmKeepItEncryptedAndNeverWritePlaintext", func(t *testing.T) {
		t.Parallel()
		home := encryptedHome(t)
		// Scan the directory all along the edits: a temporary file must
		// never hold plaintext either.
		done := make(chan struct{})
		var found []string
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				found = append(found, plaintextFiles(t, home)...)
				select {
				case <-done:
					return
				default:
				}
			}
		})
		for _, args := range [][]string{{"set", "canary", canary + "-2"}, {"set", "other", canary + "-other"},
			{"rm", "other"}, {"set", "canary", canary}, {"delete", "canary"}, {"set", "canary", canary + "-3"}} {
			r := run(t, append([]string{"--home", home, "secret"}, args...)...)
			if r.code != 0 || !strings.Contains(r.stdout, "age-encrypted") || strings.Contains(r.stdout+r.stderr, canary) {
				t.Errorf("secret %v: %d %s %s", args, r.code, r.stdout, r.stderr)
			}
		}
		close(done)
		wg.Wait()
		if len(found) > 0 {
			t.Errorf("plaintext canary seen in %v", found)
		}
		s := decryptHome(t, home)
		if _, ok := s["other"]; ok || s["canary"] != canary+"-3" {
			t.Errorf("decrypted secrets: %v", s.Names())
		}
	})

	t.Run("RotateReplacesTheKey", func(t *testing.T) {
		t.Parallel()
		home := encryptedHome(t)
		keyPath := filepath.Join(home, "age.key")
		old, err := atrest.ReadKey(keyPath)
		if err != nil {
			t.Fatal(err)
		}
		r := run(t, "--home", home, "secret", "rotate")
		if r.code != 0 || !strings.Contains(r.stdout, "rotated the age key in "+keyPath) {
			t.Fatalf("rotate: %d %s %s", r.code, r.stdout, r.stderr)
		}
		data, _ := os.ReadFile(filepath.Join(home, config.SecretsFile))
		if _, err := atrest.Decrypt(data, old); err == nil {
			t.Error("the old key still decrypts secrets.json")
		}
		if s := decryptHome(t, home); s["canary"] != canary {
			t.Errorf("secrets after rotate: %v", s.Names())
		}
		if found := plaintextFiles(t, home); len(found) > 0 {
			t.Errorf("plaintext canary in %v", found)
		}
	})

	t.Run("AKeyThatIsMissingWrongOrReadableIsRefusedAndNothingChanges", func(t *testing.T) {
		t.Parallel()
		home := encryptedHome(t)
		keyPath := filepath.Join(home, "age.key")
		secretsPath := filepath.Join(home, config.SecretsFile)
		before, _ := os.ReadFile(secretsPath)
		os.Chmod(keyPath, 0o640)
		if r := run(t, "--home", home, "secret", "set", "x", "v"); r.code == 0 || !strings.Contains(r.stderr, "chmod 600 "+keyPath) {
			t.Errorf("set with a key of mode 0640: %d %s", r.code, r.stderr)
		}
		os.Rename(keyPath, keyPath+".elsewhere")
		for _, args := range [][]string{{"secret", "set", "x", "v"}, {"secret", "rotate"}, {"config", "validate"}} {
			r := run(t, append([]string{"--home", home}, args...)...)
			if r.code == 0 || !strings.Contains(r.stderr, "no age identity found") || !strings.Contains(r.stderr, keyPath) {
				t.Errorf("%v without a key: %d %s", args, r.code, r.stderr)
			}
		}
		if _, err := atrest.GenerateKeyFile(keyPath); err != nil {
			t.Fatal(err)
		}
		r := run(t, "--home", home, "secret", "set", "x", "v")
		if r.code == 0 || !strings.Contains(r.stderr, "encrypted to another age key than key file "+keyPath) {
			t.Errorf("set with another key: %d %s", r.code, r.stderr)
		}
		if after, _ := os.ReadFile(secretsPath); !bytes.Equal(before, after) {
			t.Error("secrets.json changed")
		}
	})

	t.Run("RotateOfAPlaintextFileSaysToEncrypt", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		if r := run(t, "--home", home, "secret", "rotate"); r.code != 2 || !strings.Contains(r.stderr, "choirctl secret encrypt") {
			t.Errorf("rotate: %d %s", r.code, r.stderr)
		}
	})
}
