package atrest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"filippo.io/age"
)

// GenerateKeyFile makes a new X25519 identity in a new key file at path,
// mode 0600, written atomically; it refuses to replace an existing file.
// X25519 rather than a hybrid (post-quantum) key, so that every age
// release (Debian 12 ships age 1.1) can read secrets.json by hand.
func GenerateKeyFile(path string) (*Key, error) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return nil, fmt.Errorf("generate age key: %w", err)
	}
	if err := WriteFile(path, keyFileData(id), 0o600, false); err != nil {
		return nil, err
	}
	return &Key{Identities: []age.Identity{id}, Path: path}, nil
}

// keyFileData renders identities as age-keygen does, the first one's
// public key in a comment; the others follow it, commented as previous.
func keyFileData(first *age.X25519Identity, previous ...age.Identity) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# created: %s\n# public key: %s\n%s\n", time.Now().UTC().Format(time.RFC3339), first.Recipient(), first)
	for _, id := range previous {
		if s, ok := id.(fmt.Stringer); ok {
			fmt.Fprintf(&b, "# previous key, kept only while secrets.json is re-encrypted\n%s\n", s)
		}
	}
	return []byte(b.String())
}

// Rotate replaces k, a key file, with a new identity and re-encrypts
// secrets.json (at secretsPath, plain being its content) to it and to
// home/age.recipients. The order keeps every crash recoverable: the key
// file first holds the new identity and the old ones, then secrets.json
// is replaced, then the old identities are dropped. It returns the new key.
func Rotate(home string, k *Key, secretsPath string, plain []byte) (*Key, error) {
	if k.Credential {
		return nil, fmt.Errorf("the age identity is the %s, which choirctl cannot rewrite: "+
			"decrypt it into a key file (systemd-creds decrypt), rotate with %s naming that file, "+
			"then encrypt the new key file into the credential again (systemd-creds encrypt) and restart choird", k, KeyFileEnv)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return nil, fmt.Errorf("generate age key: %w", err)
	}
	next := &Key{Identities: []age.Identity{id}, Path: k.Path}
	recipients, err := next.Recipients(home)
	if err != nil {
		return nil, err
	}
	data, err := Encrypt(plain, recipients)
	if err != nil {
		return nil, err
	}
	if err := WriteFile(k.Path, keyFileData(id, k.Identities...), 0o600, true); err != nil {
		return nil, err
	}
	if err := WriteFile(secretsPath, data, 0o600, true); err != nil {
		return nil, errors.Join(err, fmt.Errorf("secrets.json still needs the previous key, kept in %s", k.Path))
	}
	if err := WriteFile(k.Path, keyFileData(id), 0o600, true); err != nil {
		return nil, fmt.Errorf("secrets.json is re-encrypted, but the previous key is still in %s: %w", k.Path, err)
	}
	return next, nil
}
