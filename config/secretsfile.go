package config

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/choirhq/choir/config/atrest"
)

// SecretsAtRest says how secrets.json is stored on disk.
type SecretsAtRest struct {
	// Encrypted is set when secrets.json is an age file.
	Encrypted bool
	// Key names the identity that decrypted it (a systemd credential or a
	// key file).
	Key string
}

// PlaintextWarning is what choird logs when secrets.json is plaintext.
const PlaintextWarning = "secrets.json is stored in plaintext: anyone who reads the file or a backup of it reads every secret; " +
	"encrypt it at rest with: choirctl secret encrypt"

// DecryptSecrets returns the JSON of secrets.json, whose bytes data were
// read from the .choir.d directory dir: data itself when it is plaintext,
// else data decrypted with the identity atrest.FindKey finds, which it
// returns too (nil for plaintext). The plaintext stays in memory.
func DecryptSecrets(dir string, data []byte) ([]byte, *atrest.Key, error) {
	if !atrest.IsEncrypted(data) {
		return data, nil, nil
	}
	key, err := atrest.FindKey(dir)
	if err != nil && !errors.Is(err, atrest.ErrNoIdentity) {
		return nil, nil, fmt.Errorf("secrets.json is age-encrypted, but: %w", err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("secrets.json is age-encrypted, but: %w (choird's unit gives it with "+
			"LoadCredentialEncrypted=%s:...; else put the key file, mode 0600, at $%s or %s)",
			err, atrest.CredentialName, atrest.KeyFileEnv, atrest.DefaultKeyFile(dir))
	}
	plain, err := atrest.Decrypt(data, key)
	if err != nil {
		return nil, nil, err
	}
	return plain, key, nil
}

// EncryptSecrets renders secrets as secrets.json encrypted to key's
// recipients (and those of dir/age.recipients).
func EncryptSecrets(dir string, s Secrets, key *atrest.Key) ([]byte, error) {
	plain, err := s.marshalValues()
	if err != nil {
		return nil, err
	}
	recipients, err := key.Recipients(dir)
	if err != nil {
		return nil, err
	}
	return atrest.Encrypt(plain, recipients)
}

// EncryptResult is what EncryptSecretsFile did.
type EncryptResult struct {
	// Already is set when secrets.json was encrypted before: nothing
	// changed.
	Already bool
	// Key is the identity it is encrypted to; Generated says that
	// EncryptSecretsFile made it.
	Key       *atrest.Key
	Generated bool
	// Secrets counts the secrets.
	Secrets int
}

// EncryptSecretsFile encrypts dir/secrets.json in place to the identity
// atrest.FindKey finds, generating a key file (atrest.KeyFileFor) when
// there is none. The plaintext file is replaced atomically and its content
// overwritten (atrest.ReplaceScrubbing). The caller holds the directory's
// edit lock.
func EncryptSecretsFile(dir string) (EncryptResult, error) {
	path := filepath.Join(dir, SecretsFile)
	data, err := ReadSecretsFile(path)
	if err != nil {
		return EncryptResult{}, err
	}
	if atrest.IsEncrypted(data) {
		return EncryptResult{Already: true}, nil
	}
	secrets, err := ParseSecrets(data)
	if err != nil {
		return EncryptResult{}, fmt.Errorf("parse %s (fix it by hand first):\n%w", path, err)
	}
	res := EncryptResult{Secrets: len(secrets)}
	res.Key, err = atrest.FindKey(dir)
	if errors.Is(err, atrest.ErrNoIdentity) {
		res.Key, err = atrest.GenerateKeyFile(atrest.KeyFileFor(dir))
		res.Generated = err == nil
	}
	if err != nil {
		return EncryptResult{}, err
	}
	enc, err := EncryptSecrets(dir, secrets, res.Key)
	if err != nil {
		return EncryptResult{}, err
	}
	return res, atrest.ReplaceScrubbing(path, enc, 0o600)
}
