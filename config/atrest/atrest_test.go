package atrest_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/choirhq/choir/config/atrest"
)

const plain = `{"telegram-bot": "canary-7f3a9c"}` + "\n"

// newKey makes a key file in a new directory, which it returns too.
func newKey(t *testing.T) (*atrest.Key, string) {
	t.Helper()
	dir := t.TempDir()
	k, err := atrest.GenerateKeyFile(filepath.Join(dir, atrest.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	return k, dir
}

func encrypt(t *testing.T, k *atrest.Key, home string) []byte {
	t.Helper()
	r, err := k.Recipients(home)
	if err != nil {
		t.Fatal(err)
	}
	data, err := atrest.Encrypt([]byte(plain), r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestEncryption(t *testing.T) {
	t.Parallel()

	t.Run("ArmoredAndBinaryFilesRoundTrip", func(t *testing.T) {
		t.Parallel()
		k, home := newKey(t)
		armored := encrypt(t, k, home)
		if !bytes.HasPrefix(armored, []byte("-----BEGIN AGE ENCRYPTED FILE-----\n")) ||
			!bytes.HasSuffix(armored, []byte("-----END AGE ENCRYPTED FILE-----\n")) || bytes.Contains(armored, []byte("canary")) {
			t.Fatalf("Encrypt wrote no armored age file:\n%s", armored)
		}
		var binary bytes.Buffer
		w, err := age.Encrypt(&binary, k.Identities[0].(*age.X25519Identity).Recipient())
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(plain))
		w.Close()
		for name, data := range map[string][]byte{"armored": armored, "binary": binary.Bytes(),
			"armored after a blank line": append([]byte("\n"), armored...)} {
			if !atrest.IsEncrypted(data) {
				t.Errorf("%s: IsEncrypted = false", name)
			}
			got, err := atrest.Decrypt(data, k)
			if err != nil || string(got) != plain {
				t.Errorf("%s: Decrypt = %q, %v", name, got, err)
			}
		}
		for _, data := range []string{"", "{}", plain, "  {\"age-encryption.org/v1\": \"x\"}"} {
			if atrest.IsEncrypted([]byte(data)) {
				t.Errorf("IsEncrypted(%q) = true", data)
			}
		}
	})

	t.Run("AnotherKeyIsRefusedByName", func(t *testing.T) {
		t.Parallel()
		k, home := newKey(t)
		other, _ := newKey(t)
		_, err := atrest.Decrypt(encrypt(t, k, home), other)
		if err == nil || !strings.Contains(err.Error(), "encrypted to another age key than key file "+other.Path) {
			t.Errorf("Decrypt with another key: %v", err)
		}
	})

	t.Run("RecipientsFileAddsABackupKey", func(t *testing.T) {
		t.Parallel()
		k, home := newKey(t)
		backup, _ := age.GenerateX25519Identity()
		if err := os.WriteFile(filepath.Join(home, atrest.RecipientsFileName),
			[]byte("# offline backup\n"+backup.Recipient().String()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		data := encrypt(t, k, home)
		for _, id := range []age.Identity{k.Identities[0], backup} {
			if got, err := atrest.Decrypt(data, &atrest.Key{Identities: []age.Identity{id}}); err != nil || string(got) != plain {
				t.Errorf("Decrypt = %q, %v", got, err)
			}
		}
	})
}

func TestKeyFile(t *testing.T) {
	t.Parallel()

	t.Run("GeneratedWithMode0600AndNeverOverwritten", func(t *testing.T) {
		t.Parallel()
		k, _ := newKey(t)
		st, err := os.Stat(k.Path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("key file: %v, %v", st, err)
		}
		before, _ := os.ReadFile(k.Path)
		if _, err := atrest.GenerateKeyFile(k.Path); !errors.Is(err, fs.ErrExist) {
			t.Errorf("second GenerateKeyFile: %v", err)
		}
		if after, _ := os.ReadFile(k.Path); !bytes.Equal(before, after) {
			t.Error("the key file changed")
		}
		if r, err := atrest.ReadKey(k.Path); err != nil || len(r.Identities) != 1 {
			t.Errorf("ReadKey: %v", err)
		}
	})

	t.Run("ReadableByOthersIsRefusedWithTheFix", func(t *testing.T) {
		t.Parallel()
		k, _ := newKey(t)
		for _, mode := range []fs.FileMode{0o640, 0o604, 0o620} {
			os.Chmod(k.Path, mode)
			_, err := atrest.ReadKey(k.Path)
			var insecure *atrest.InsecureKeyError
			if !errors.As(err, &insecure) || !strings.Contains(err.Error(), "run: chmod 600 "+k.Path) {
				t.Errorf("mode %04o: %v", mode, err)
			}
		}
	})

	t.Run("RotateReplacesTheKeyAndReencrypts", func(t *testing.T) {
		t.Parallel()
		k, home := newKey(t)
		secrets := filepath.Join(home, "secrets.json")
		if err := atrest.WriteFile(secrets, encrypt(t, k, home), 0o600, true); err != nil {
			t.Fatal(err)
		}
		next, err := atrest.Rotate(home, k, secrets, []byte(plain))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(secrets)
		if _, err := atrest.Decrypt(data, k); err == nil {
			t.Error("the old key still decrypts secrets.json")
		}
		reread, err := atrest.ReadKey(k.Path)
		if err != nil || len(reread.Identities) != 1 {
			t.Fatalf("key file after rotate: %v", err)
		}
		for _, key := range []*atrest.Key{next, reread} {
			if got, err := atrest.Decrypt(data, key); err != nil || string(got) != plain {
				t.Errorf("Decrypt with the new key = %q, %v", got, err)
			}
		}
		if st, _ := os.Stat(k.Path); st.Mode().Perm() != 0o600 {
			t.Errorf("key file mode %04o after rotate", st.Mode().Perm())
		}
		_, err = atrest.Rotate(home, &atrest.Key{Identities: next.Identities, Path: "/run/credentials/x", Credential: true},
			secrets, []byte(plain))
		if err == nil || !strings.Contains(err.Error(), "systemd-creds") {
			t.Errorf("Rotate of a systemd credential: %v", err)
		}
	})
}

// TestFindKey sets environment variables, so it is not parallel.
func TestFindKey(t *testing.T) {
	k, home := newKey(t)
	creds := t.TempDir()
	credKey, err := atrest.GenerateKeyFile(filepath.Join(creds, atrest.CredentialName))
	if err != nil {
		t.Fatal(err)
	}
	// systemd may grant the unit's user an ACL entry, whose mask shows as
	// the group bits: a credential's mode is systemd's business.
	os.Chmod(credKey.Path, 0o440)
	envKey, _ := newKey(t)

	t.Setenv("CREDENTIALS_DIRECTORY", creds)
	t.Setenv(atrest.KeyFileEnv, envKey.Path)
	if got, err := atrest.FindKey(home); err != nil || got.Path != credKey.Path || !got.Credential ||
		!strings.Contains(got.String(), "systemd credential choir-age-key") {
		t.Errorf("with a credential: %v, %v", got, err)
	}
	os.Remove(credKey.Path)
	if got, err := atrest.FindKey(home); err != nil || got.Path != envKey.Path || got.Credential {
		t.Errorf("with $%s: %v, %v", atrest.KeyFileEnv, got, err)
	}
	t.Setenv(atrest.KeyFileEnv, "")
	if got, err := atrest.FindKey(home); err != nil || got.Path != k.Path {
		t.Errorf("with home's key file: %v, %v", got, err)
	}
	os.Remove(k.Path)
	_, err = atrest.FindKey(home)
	if !errors.Is(err, atrest.ErrNoIdentity) || !strings.Contains(err.Error(), filepath.Join(creds, atrest.CredentialName)) ||
		!strings.Contains(err.Error(), k.Path) {
		t.Errorf("with no key: %v (want every place looked in)", err)
	}
	t.Setenv(atrest.KeyFileEnv, filepath.Join(home, "absent.key"))
	if _, err := atrest.FindKey(home); !errors.Is(err, atrest.ErrNoIdentity) || !strings.Contains(err.Error(), "absent.key") {
		t.Errorf("with $%s naming no file: %v", atrest.KeyFileEnv, err)
	}
}

func TestWriteFile(t *testing.T) {
	t.Parallel()

	t.Run("ModeIsExactAndNoTemporaryFileIsLeft", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		for _, perm := range []fs.FileMode{0o600, 0o644} {
			if err := atrest.WriteFile(path, []byte("x"), perm, true); err != nil {
				t.Fatal(err)
			}
			if st, _ := os.Stat(path); st.Mode().Perm() != perm {
				t.Errorf("mode %04o, want %04o", st.Mode().Perm(), perm)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("directory holds %d files", len(entries))
		}
	})

	t.Run("ReplaceScrubbingZeroesTheOldFile", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "secrets.json")
		os.WriteFile(path, []byte(plain), 0o600)
		old, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		if err := atrest.ReplaceScrubbing(path, []byte("ciphertext"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != "ciphertext" {
			t.Errorf("path holds %q", got)
		}
		buf := make([]byte, len(plain))
		if n, _ := old.ReadAt(buf, 0); n != len(plain) || !bytes.Equal(buf, make([]byte, len(plain))) {
			t.Errorf("the old inode still holds %q", buf[:n])
		}
	})
}
