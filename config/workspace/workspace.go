// Package workspace says which host directories may be an agent's
// workspace. A workspace is given to its agent recursively (under the
// docker runtime every file in it is chowned to the agent's uid at its
// first start), and the agent reads and writes everything in it, so no
// workspace may be, hold or sit inside a directory the host needs (issue
// 29). Config validation and the docker runtime's chown both ask here.
package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// systemDirs are never a workspace, nor inside one, nor hold one.
var systemDirs = []string{"/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/dev", "/proc", "/sys"}

// stateDir holds services' state: a workspace may sit under one service's
// directory (/var/lib/choir/workspaces/main), never be one
// (/var/lib/postgresql) nor hold it.
const stateDir = "/var/lib"

// Within reports whether p is dir or inside it; both clean and absolute.
func Within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// CheckPath says why the absolute path p cannot be a workspace:
// it is /, a system directory (/etc, /usr, ...) or inside one, /var/lib,
// a directory holding it or one service's directory right under it, or it
// is, holds or sits inside one of protected: choird's home first (whose
// Dir may hold workspaces), then any other. homeDir, when not empty, is choird's user's home directory:
// a workspace may sit inside it but never be it nor hold it. nil: none of
// these.
func CheckPath(p, homeDir string, protected ...string) error {
	p = filepath.Clean(p)
	if p == "/" {
		return fmt.Errorf("%s is the root directory: every file of the host would be the agent's", p)
	}
	for _, d := range systemDirs {
		if Within(p, d) || Within(d, p) {
			return fmt.Errorf("%s is, holds or sits inside %s, a system directory: choose a directory of its own, e.g. /var/lib/choir/workspaces/<name>", p, d)
		}
	}
	if Within(stateDir, p) {
		return fmt.Errorf("%s is or holds %s, where services keep their state: choose a directory of its own", p, stateDir)
	}
	if filepath.Dir(p) == stateDir {
		return fmt.Errorf("%s is a service's state directory in %s: use a directory inside one, e.g. %s/choir/workspaces/<name>", p, stateDir, stateDir)
	}
	if homeDir != "" && Within(filepath.Clean(homeDir), p) {
		return fmt.Errorf("%s is or holds the home directory %s of choird's user: choose a directory inside it", p, homeDir)
	}
	return checkProtected(p, protected)
}

// Dir is the one directory inside choird's home where
// workspaces may live (choirctl init puts "main" there): nothing else of
// the home (config, secrets, clones, logs, run state) is ever in one.
const Dir = "workspaces"

// checkProtected refuses p when it is, holds or sits inside one of
// protected, choird's home first; a workspace inside the home's
// Dir is allowed.
func checkProtected(p string, protected []string) error {
	for i, d := range protected {
		if d == "" {
			continue
		}
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		if i == 0 && p != filepath.Join(d, Dir) && Within(p, filepath.Join(d, Dir)) {
			continue
		}
		if Within(p, d) || Within(d, p) {
			what := "choird's home"
			if i > 0 {
				what = "a protected directory"
			}
			return fmt.Errorf("%s is, holds or sits inside %s, %s: choose a directory outside it (or in its %s/ directory)", p, d, what, Dir)
		}
	}
	return nil
}

// UserHome is choird's user's home directory, "" if unknown.
func UserHome() string {
	h, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(h) {
		return ""
	}
	return h
}
