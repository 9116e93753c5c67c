package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// gitConfig is what the agent sets in its global git configuration: the
// leased identity's user.name and user.email, and a url.<route>.insteadOf
// for each of the identity's hosts (gitRoutes).
type gitConfig struct {
	name, email string
	insteadOf   [][2]string // route prefix, https://<host>/
}

// write writes c to home's .gitconfig in one go, as git config --global
// would have, without a git process per key: at an agent's start those
// processes cost more than the rest of its start together. A .gitconfig
// already there (a reused HOME) is kept, with c after it, where its
// values win, and its credential helpers emptied: git must never ask one
// that an older agent left.
func (c gitConfig) write(home string) error {
	if home == "" {
		return errors.New("no HOME for the global git configuration")
	}
	var b strings.Builder
	path := filepath.Join(home, ".gitconfig")
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read %s: %w", path, err)
	default:
		b.Write(old)
		if len(old) > 0 && old[len(old)-1] != '\n' {
			b.WriteByte('\n')
		}
		b.WriteString("[credential]\n\thelper =\n")
	}
	fmt.Fprintf(&b, "[user]\n\tname = %s\n\temail = %s\n", gitValue(c.name), gitValue(c.email))
	for _, u := range c.insteadOf {
		fmt.Fprintf(&b, "[url %s]\n\tinsteadOf = %s\n", gitSubsection(u[0]), gitValue(u[1]))
	}
	tmp := path + ".choir-tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// gitValue is v as a git config value: bare when git would read it back
// unchanged, otherwise quoted with git's escapes (git-config(1), "Syntax").
func gitValue(v string) string {
	if v != "" && v == strings.TrimSpace(v) && !strings.ContainsAny(v, "\"\\;#\n\t\r\b") {
		return v
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range v {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\r':
			// git has no escape for it; a value never needs one
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// gitSubsection is s as a quoted subsection name: only " and \ are
// escaped there, and a newline cannot be written at all.
func gitSubsection(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", "", "\r", "")
	return `"` + r.Replace(s) + `"`
}
