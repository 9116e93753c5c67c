package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrPostgresSecret is wrapped by PostgresDSN when the Postgres secret is
// missing or malformed.
var ErrPostgresSecret = errors.New("bad postgres secret")

// PostgresDSN returns a keyword/value connection string for the configured
// database, such as
//
//	host='localhost' port='5432' dbname='choir' user='postgres' password='pw'
//
// which pgx and libpq both accept. Every value is single-quoted with
// backslash escapes, so any character but NUL is safe. The user and
// password come from the secret named by postgres.secret, in the form
// user:password; the password may be empty (then the driver may consult
// ~/.pgpass) and may contain colons. A host that is an absolute path is the
// directory of the server's Unix socket, which is how the keyword form
// spells a socket connection.
func (c *Config) PostgresDSN(s Secrets) (string, error) {
	p := c.Postgres
	user, password, err := postgresCredentials(p.Secret, s)
	if err != nil {
		return "", err
	}
	kv := [][2]string{
		{"host", p.Host},
		{"port", strconv.Itoa(p.Port)},
		{"dbname", p.Database},
		{"user", user},
	}
	if password != "" {
		kv = append(kv, [2]string{"password", password})
	}
	if p.SSLMode != "" {
		kv = append(kv, [2]string{"sslmode", p.SSLMode})
	}
	var b strings.Builder
	for i, pair := range kv {
		if strings.IndexByte(pair[1], 0) >= 0 {
			// Drivers refuse NUL; say which setting holds it but not
			// its value.
			return "", fmt.Errorf("postgres %s contains a NUL byte", pair[0])
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(pair[0])
		b.WriteString("='")
		b.WriteString(strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pair[1]))
		b.WriteByte('\'')
	}
	return b.String(), nil
}

// postgresCredentials splits the secret named name into user and password.
// Errors name the secret, never its value.
func postgresCredentials(name string, s Secrets) (user, password string, err error) {
	if name == "" {
		return "", "", fmt.Errorf("postgres.secret is empty: %w", ErrPostgresSecret)
	}
	v, ok := s[name]
	if !ok {
		return "", "", fmt.Errorf("secret %q is not in secrets.json; set it with: choirctl secret set %s: %w", name, name, ErrPostgresSecret)
	}
	user, password, ok = strings.Cut(v, ":")
	if !ok || user == "" {
		return "", "", fmt.Errorf("secret %q must have the form user:password (the password may be empty): %w", name, ErrPostgresSecret)
	}
	return user, password, nil
}

// Describe locates the server for messages: host:port, or the path of the
// Unix socket when Host is a socket directory.
func (p Postgres) Describe() string {
	port := strconv.Itoa(p.Port)
	if filepath.IsAbs(p.Host) {
		return filepath.Join(p.Host, ".s.PGSQL."+port)
	}
	return net.JoinHostPort(p.Host, port)
}
