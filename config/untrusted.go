package config

import (
	pathpkg "path"
	"regexp"
	"strings"

	"github.com/choirhq/choir/strictjson"
)

// UntrustedInput is an agent's policy for lanes that read strangers'
// words (issue 30): once a lane's context holds an untrusted source (a
// web page, a mail, a Notion page, an MCP server's answer, a received
// file), every call it makes that may act, and every web request that
// carries data to a host the lane has not visited, needs a person's
// approval (mode approve, the default), is refused (refuse), or runs as
// before (allow, an explicit opt-out logged at every start). Calls whose
// tool and target match an Allow entry run without asking.
type UntrustedInput struct {
	Mode UntrustedMode `json:"mode,omitempty"`
	// Allow lists "tool" or "tool:target" entries: the tool's name
	// ("choir.fs.write") and a target pattern in path.Match syntax: a
	// workspace path for the file tools ("notes/*"), every recipient for
	// choir.email.send ("me@example.com", "*@example.com"), the host for
	// the web tools ("api.example.com"), the page or database id for
	// Notion. An entry without a target allows every call of the tool.
	Allow []string `json:"allow,omitempty"`
}

// UntrustedMode is what the untrusted-input policy does with a call it
// covers.
type UntrustedMode string

// The untrusted-input modes.
const (
	UntrustedApprove UntrustedMode = "approve"
	UntrustedRefuse  UntrustedMode = "refuse"
	UntrustedAllow   UntrustedMode = "allow"
)

// Effective is the mode with the default applied: approve.
func (u UntrustedInput) Effective() UntrustedMode {
	if u.Mode == "" {
		return UntrustedApprove
	}
	return u.Mode
}

var allowToolRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)

// untrustedInput checks an agent's untrusted_input at p.
func (v *validator) untrustedInput(p string, u UntrustedInput) {
	switch u.Mode {
	case "", UntrustedApprove, UntrustedRefuse, UntrustedAllow:
	default:
		v.add(sub(p, "mode"), `must be "approve" (the default), "refuse" or "allow"`)
	}
	for i, e := range u.Allow {
		ep := strictjson.PathIndex(sub(p, "allow"), i)
		name, target, hasTarget := strings.Cut(e, ":")
		if !allowToolRE.MatchString(name) {
			v.add(ep, `must be a tool name such as "choir.fs.write", optionally with ":<target>" such as "choir.fs.write:notes/*"`)
			continue
		}
		if hasTarget {
			if _, err := pathpkg.Match(target, ""); target == "" || err != nil {
				v.add(ep, "target %q: want a pattern such as notes/* or *@example.com (path.Match syntax)", target)
			}
		}
	}
}
