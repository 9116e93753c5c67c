package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/choirhq/choir/config/atrest"
)

// InsecureSecretsError is returned by Load when secrets.json can be read or
// written by users other than its owner.
type InsecureSecretsError struct {
	Path string
	Mode fs.FileMode
}

func (e *InsecureSecretsError) Error() string {
	var what string
	switch perm := e.Mode.Perm(); {
	case perm&0o044 != 0 && perm&0o022 != 0:
		what = "read and change"
	case perm&0o044 != 0:
		what = "read"
	case perm&0o022 != 0:
		what = "change"
	default:
		what = "access"
	}
	return fmt.Sprintf("%s: mode %04o lets other users %s secrets; run: chmod 600 %s",
		SecretsFile, e.Mode.Perm(), what, e.Path)
}

// Load reads config.json and secrets.json from the .choir.d directory dir,
// parses both strictly, applies defaults and validates. Problems with the
// content are reported as a [*strictjson.Error] (wrapped, so use errors.As), all at
// once. A missing file is reported with a hint to run choirctl init, and a
// secrets.json that other users can read or write is refused with an
// [*InsecureSecretsError].
func Load(dir string) (*Config, Secrets, error) {
	cfg, secrets, _, err := LoadAtRest(dir)
	return cfg, secrets, err
}

// LoadAtRest is Load, and says how secrets.json is stored.
func LoadAtRest(dir string) (*Config, Secrets, SecretsAtRest, error) {
	configData, secretsData, rest, err := readFiles(dir)
	if err != nil {
		return nil, nil, rest, err
	}
	cfg, secrets, err := parseFiles(dir, configData, secretsData)
	return cfg, secrets, rest, err
}

// readFiles reads config.json and secrets.json, decrypting the latter if
// it is age-encrypted.
func readFiles(dir string) (configData, secretsData []byte, rest SecretsAtRest, err error) {
	configData, err = os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, nil, rest, missingHint(fmt.Errorf("read config: %w", err))
	}
	secretsData, err = ReadSecretsFile(filepath.Join(dir, SecretsFile))
	if err != nil {
		return nil, nil, rest, missingHint(err)
	}
	secretsData, key, err := DecryptSecrets(dir, secretsData)
	if err != nil {
		return nil, nil, rest, err
	}
	if key != nil {
		rest = SecretsAtRest{Encrypted: true, Key: key.String()}
	}
	return configData, secretsData, rest, nil
}

// parseFiles parses and validates what readFiles read from dir.
func parseFiles(dir string, configData, secretsData []byte) (*Config, Secrets, error) {
	configPath := filepath.Join(dir, ConfigFile)
	secretsPath := filepath.Join(dir, SecretsFile)
	cfg, cerr := Parse(configData)
	if cerr != nil {
		cerr = fmt.Errorf("parse %s:\n%w", configPath, cerr)
	}
	secrets, serr := ParseSecrets(secretsData)
	if serr != nil {
		serr = fmt.Errorf("parse %s:\n%w", secretsPath, serr)
	}
	if err := errors.Join(cerr, serr); err != nil {
		return nil, nil, err
	}

	if err := cfg.ValidateAt(dir, secrets); err != nil {
		return nil, nil, fmt.Errorf("invalid %s:\n%w", configPath, err)
	}
	return cfg, secrets, nil
}

func missingHint(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (run choirctl init to create it)", err)
	}
	return err
}

// ReadSecretsFile reads secrets.json after checking, on the open file so
// that it cannot be swapped in between, that only its owner can access it.
func ReadSecretsFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read secrets: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read secrets: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("read secrets: %s is not a regular file", path)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, &InsecureSecretsError{Path: path, Mode: info.Mode()}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read secrets: %w", err)
	}
	return data, nil
}

// WriteFiles writes cfg to dir/config.json (mode 0644) and secrets to
// dir/secrets.json (mode 0600), creating dir with mode 0700 if needed. Each
// file is written to a temporary file and then moved into place, so a
// reader sees the old file or the new one, never a partial one. Unless
// overwrite is set, it refuses, with an error wrapping fs.ErrExist, when
// either file exists, and then writes neither. It does not validate: the
// skeleton written by choirctl init is incomplete on purpose.
func WriteFiles(dir string, cfg *Config, secrets Secrets, overwrite bool) error {
	configData, err := cfg.MarshalIndent()
	if err != nil {
		return err
	}
	secretsData, err := secrets.marshalValues()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create config directory: %w", err)
	}
	configPath := filepath.Join(dir, ConfigFile)
	secretsPath := filepath.Join(dir, SecretsFile)
	if !overwrite {
		for _, p := range []string{configPath, secretsPath} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("refuse to overwrite %s: %w", p, fs.ErrExist)
			}
		}
	}
	// Secrets first: a config.json whose secrets.json is missing would
	// fail to load with a less helpful message.
	if err := writeAtomic(secretsPath, secretsData, 0o600, overwrite); err != nil {
		return err
	}
	return writeAtomic(configPath, configData, 0o644, overwrite)
}

// WriteFileAtomic replaces path with data, mode perm, through a synced
// temporary file renamed into place: a crash leaves the old file or the
// new one, never a partial one.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	return writeAtomic(path, data, perm, true)
}

// writeAtomic writes data to a temporary file beside path and moves it into
// place. Without overwrite it links rather than renames, which fails if path
// appeared since WriteFiles checked.
func writeAtomic(path string, data []byte, perm fs.FileMode, overwrite bool) error {
	return atrest.WriteFile(path, data, perm, overwrite)
}
