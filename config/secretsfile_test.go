package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/atrest"
)

// TestEncryptedSecrets clears the environment variables that name an age
// identity, so it is not parallel.
func TestEncryptedSecrets(t *testing.T) {
	t.Setenv("CREDENTIALS_DIRECTORY", "")
	t.Setenv(atrest.KeyFileEnv, "")
	spec, err := os.ReadFile("testdata/spec-example.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := writeDir(t, string(spec), specSecretsJSON(t), 0o600)
	_, _, rest, err := config.LoadAtRest(dir)
	if err != nil || rest.Encrypted {
		t.Fatalf("plaintext: %+v, %v", rest, err)
	}

	res, err := config.EncryptSecretsFile(dir)
	if err != nil || !res.Generated || res.Secrets != len(specSecrets()) || res.Key.Path != filepath.Join(dir, atrest.KeyFileName) {
		t.Fatalf("EncryptSecretsFile = %+v, %v", res, err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, config.SecretsFile))
	for _, v := range specSecrets() {
		if strings.Contains(string(data), v) {
			t.Fatalf("secrets.json still holds a value in plaintext:\n%s", data)
		}
	}
	if res, err := config.EncryptSecretsFile(dir); err != nil || !res.Already {
		t.Errorf("second EncryptSecretsFile = %+v, %v", res, err)
	}

	c, s, rest, err := config.LoadAtRest(dir)
	if err != nil || !rest.Encrypted || rest.Key != "key file "+res.Key.Path {
		t.Fatalf("LoadAtRest: %+v, %v", rest, err)
	}
	if !reflect.DeepEqual(c, specConfig(t)) || !reflect.DeepEqual(s, specSecrets()) {
		t.Errorf("LoadAtRest of the encrypted file returned %+v, %v", c, s)
	}
	if _, s, _, err := config.LoadSnapshot(dir); err != nil || !reflect.DeepEqual(s, specSecrets()) {
		t.Errorf("LoadSnapshot: %v, %v", s, err)
	}

	if err := os.Chmod(res.Key.Path, 0o644); err != nil {
		t.Fatal(err)
	}
	var insecure *atrest.InsecureKeyError
	if _, _, err := config.Load(dir); !errors.As(err, &insecure) || !strings.Contains(err.Error(), "chmod 600 "+res.Key.Path) {
		t.Errorf("Load with a key others can read: %v", err)
	}
	if err := os.Remove(res.Key.Path); err != nil {
		t.Fatal(err)
	}
	_, _, err = config.Load(dir)
	if !errors.Is(err, atrest.ErrNoIdentity) || !strings.Contains(err.Error(), "looked in") ||
		!strings.Contains(err.Error(), "LoadCredentialEncrypted=choir-age-key") || !strings.Contains(err.Error(), res.Key.Path) {
		t.Errorf("Load without the key: %v", err)
	}
}
