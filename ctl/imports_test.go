package ctl_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestChoirctlReachesChoirdOnlyThroughTheAdminAPI checks what choirctl
// links of this module: itself, the wire contracts (rpc/admin, and
// rpc/wire, which it shares with the agent protocol), config, strictjson,
// and sql for db migrate; never choird (daemon/...), jobs, db, the agent,
// or the agent protocol's server (rpc and rpc/internal/...).
func TestChoirctlReachesChoirdOnlyThroughTheAdminAPI(t *testing.T) {
	t.Parallel()
	const module = "github.com/choirhq/choir"
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goBin, "list", "-deps", module+"/cmd/choirctl").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := func(pkg string) bool {
		if strings.HasPrefix(pkg, "ctl/") { // choirctl's own command groups
			return true
		}
		switch pkg {
		case "cmd/choirctl", "ctl", "config", "config/configdiff", "config/modelenv", "config/workspace", "config/starter", "config/atrest", "sql", "strictjson",
			"rpc/admin", "rpc/wire", "rpc/unixsock", "rpc/usage",
			// config validates web.allow_hosts with the guard's parser,
			// egress.allow with the host patterns and a git identity's
			// repos with the repository patterns; they reach nothing.
			"internal/netguard", "internal/hostpattern", "internal/repopattern",
			// The shape of log lines on stderr, text or JSON; it reaches
			// nothing.
			"internal/logjson":
			return true
		}
		return false
	}
	var seen int
	for _, pkg := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(pkg, module+"/")
		if !ok {
			continue
		}
		seen++
		if !allowed(rel) {
			t.Errorf("choirctl imports %s; it may reach choird only through rpc/admin", pkg)
		}
	}
	if seen == 0 {
		t.Fatalf("go list -deps named no package of %s:\n%s", module, out)
	}
}
