// Package atrest keeps .choir.d's files at rest: it replaces a file
// atomically (a synced temporary file renamed into place, the directory
// synced after), and it keeps secrets.json either as plaintext JSON or
// age-encrypted (filippo.io/age), told apart by content alone, so that no
// other part of Choir needs to know which. It finds the age identity in
// systemd's credentials ($CREDENTIALS_DIRECTORY/choir-age-key) or in a key
// file that only its owner may read, generates and rotates that key, and
// never writes a decrypted byte to disk.
package atrest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"
	"filippo.io/age/armor"
)

// Where the identity is looked for.
const (
	// CredentialName is the systemd credential holding the identity:
	// LoadCredentialEncrypted=choir-age-key:... in choird's unit makes it
	// $CREDENTIALS_DIRECTORY/choir-age-key.
	CredentialName = "choir-age-key"
	// KeyFileEnv names a key file to use instead of the default one.
	KeyFileEnv = "CHOIR_AGE_KEY_FILE"
	// KeyFileName is the default key file, in the .choir.d directory.
	KeyFileName = "age.key"
	// RecipientsFileName, in the .choir.d directory, may list more
	// recipients (one age public key a line; # starts a comment), such
	// as an offline backup key: every write encrypts to them too.
	RecipientsFileName = "age.recipients"
)

// maxPlainBytes bounds a decrypted secrets.json.
const maxPlainBytes = 16 << 20

// binaryHeader starts every binary age file; armored ones start with
// armor.Header.
const binaryHeader = "age-encryption.org/v1\n"

// IsEncrypted reports whether data is an age file, binary or armored.
// secrets.json is a JSON object otherwise, which starts with neither.
func IsEncrypted(data []byte) bool {
	return bytes.HasPrefix(data, []byte(binaryHeader)) ||
		bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte(armor.Header))
}

// ErrNoIdentity is wrapped by FindKey's error when no identity is found.
var ErrNoIdentity = errors.New("no age identity found")

// Key is an age identity file: one or more identities, and where they came
// from.
type Key struct {
	Identities []age.Identity
	// Path is the file read.
	Path string
	// Credential says that Path is a systemd credential, which choirctl
	// cannot rewrite.
	Credential bool
}

// String names where the key came from, for logs and errors.
func (k *Key) String() string {
	if k.Credential {
		return "systemd credential " + CredentialName + " (" + k.Path + ")"
	}
	return "key file " + k.Path
}

// FindKey finds the age identity for the .choir.d directory home: the
// systemd credential $CREDENTIALS_DIRECTORY/choir-age-key first, then the
// key file named by $CHOIR_AGE_KEY_FILE, then home/age.key. Missing
// everywhere, the error wraps ErrNoIdentity and says where it looked.
func FindKey(home string) (*Key, error) {
	var looked []string
	if dir := os.Getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		p := filepath.Join(dir, CredentialName)
		// systemd lets only the unit's user read its credentials; the
		// mode bits may show an ACL's mask, not who can read it.
		k, err := readKey(p, false)
		if err == nil {
			k.Credential = true
			return k, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		looked = append(looked, p+" (systemd credential "+CredentialName+")")
	} else {
		looked = append(looked, "$CREDENTIALS_DIRECTORY/"+CredentialName+" ($CREDENTIALS_DIRECTORY is not set)")
	}
	if p := os.Getenv(KeyFileEnv); p != "" {
		k, err := ReadKey(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: $%s names %s, which does not exist", ErrNoIdentity, KeyFileEnv, p)
		}
		return k, err
	}
	looked = append(looked, "$"+KeyFileEnv+" (not set)")
	p := DefaultKeyFile(home)
	k, err := ReadKey(p)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	looked = append(looked, p)
	return nil, fmt.Errorf("%w; looked in: %s", ErrNoIdentity, strings.Join(looked, ", "))
}

// KeyFileFor is the key file FindKey reads after the systemd credential:
// $CHOIR_AGE_KEY_FILE, or home/age.key. choirctl secret encrypt creates
// it there.
func KeyFileFor(home string) string {
	if p := os.Getenv(KeyFileEnv); p != "" {
		return p
	}
	return DefaultKeyFile(home)
}

// DefaultKeyFile is home/age.key.
func DefaultKeyFile(home string) string { return filepath.Join(home, KeyFileName) }

// InsecureKeyError refuses a key file that other users can access.
type InsecureKeyError struct {
	Path string
	Mode fs.FileMode
}

func (e *InsecureKeyError) Error() string {
	return fmt.Sprintf("age key %s: mode %04o lets other users read or change the key that decrypts secrets.json; run: chmod 600 %s",
		e.Path, e.Mode.Perm(), e.Path)
}

// ReadKey reads an age identity file, refusing it, on the open file so
// that it cannot be swapped in between, when group or others may access
// it. A missing file wraps fs.ErrNotExist.
func ReadKey(path string) (*Key, error) { return readKey(path, true) }

func readKey(path string, checkMode bool) (*Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read age key: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read age key: %w", err)
	}
	if checkMode && info.Mode().Perm()&0o077 != 0 {
		return nil, &InsecureKeyError{Path: path, Mode: info.Mode()}
	}
	ids, err := age.ParseIdentities(bufio.NewReader(io.LimitReader(f, 1<<20)))
	if err != nil {
		return nil, fmt.Errorf("age key %s: %w (want a file made by age-keygen or choirctl secret encrypt)", path, err)
	}
	for _, id := range ids {
		switch id.(type) {
		case *age.X25519Identity, *age.HybridIdentity:
		default:
			return nil, fmt.Errorf("age key %s: only X25519 and hybrid (post-quantum) identities are supported", path)
		}
	}
	return &Key{Identities: ids, Path: path}, nil
}

// Recipients are the public keys that secrets.json is encrypted to: those
// of k's identities, and those listed in home/age.recipients if it exists.
func (k *Key) Recipients(home string) ([]age.Recipient, error) {
	var out []age.Recipient
	for _, id := range k.Identities {
		switch id := id.(type) {
		case *age.X25519Identity:
			out = append(out, id.Recipient())
		case *age.HybridIdentity:
			out = append(out, id.Recipient())
		}
	}
	p := filepath.Join(home, RecipientsFileName)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read recipients: %w", err)
	}
	more, err := age.ParseRecipients(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (want one age public key a line)", p, err)
	}
	return append(out, more...), nil
}

// Decrypt decrypts an age file, binary or armored, with k. A key that
// does not match is said so, naming it.
func Decrypt(data []byte, k *Key) ([]byte, error) {
	var src io.Reader = bytes.NewReader(data)
	if !bytes.HasPrefix(data, []byte(binaryHeader)) {
		src = armor.NewReader(src)
	}
	r, err := age.Decrypt(src, k.Identities...)
	var nomatch *age.NoIdentityMatchError
	if errors.As(err, &nomatch) {
		return nil, fmt.Errorf("secrets.json is encrypted to another age key than %s: use the key it was encrypted to", k)
	}
	if err != nil {
		return nil, fmt.Errorf("decrypt secrets.json with %s: %w", k, err)
	}
	plain, err := io.ReadAll(io.LimitReader(r, maxPlainBytes+1))
	if err != nil {
		return nil, fmt.Errorf("decrypt secrets.json with %s: %w", k, err)
	}
	if len(plain) > maxPlainBytes {
		return nil, fmt.Errorf("decrypted secrets.json is over %d bytes", maxPlainBytes)
	}
	return plain, nil
}

// Encrypt encrypts plain to recipients as an armored age file: text, so
// that it reads and copies like the JSON it replaces.
func Encrypt(plain []byte, recipients []age.Recipient) ([]byte, error) {
	if len(recipients) == 0 {
		return nil, errors.New("encrypt secrets.json: no recipient")
	}
	var buf bytes.Buffer
	aw := armor.NewWriter(&buf)
	w, err := age.Encrypt(aw, recipients...)
	if err != nil {
		return nil, fmt.Errorf("encrypt secrets.json: %w", err)
	}
	if _, err := w.Write(plain); err != nil {
		return nil, fmt.Errorf("encrypt secrets.json: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encrypt secrets.json: %w", err)
	}
	if err := aw.Close(); err != nil {
		return nil, fmt.Errorf("encrypt secrets.json: %w", err)
	}
	return buf.Bytes(), nil
}
