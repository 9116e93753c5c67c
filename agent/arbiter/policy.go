package arbiter

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
	"github.com/choirhq/choir/config"
)

// This file is the untrusted-input policy (issue 30): the model proposes,
// the arbiter decides. A lane whose context holds an untrusted source
// (provenance.go) may have read instructions a stranger wrote, and no
// model resists them reliably; so each of its calls that may act (any
// side effect but read), and each web request that would carry data to a
// host the lane has not visited (a query string, a form typed in), waits
// for a person's approval of that exact call, or is refused, by the
// agent's untrusted_input mode. A call whose tool and target are on the
// agent's allowlist runs. What a lane that read nothing untrusted may do
// does not change.

// Names of the web tools the policy reads the URL of.
const (
	nameWebFetch  = "choir.web.fetch"
	nameWebBrowse = "choir.web.browse"
)

// decision is what the policy decided of one call.
type decision struct {
	// sources are the lane's untrusted sources when the call was checked.
	sources []string
	// policy is the decision recorded in the call's intent
	// (commitlog.Policy*), empty for a lane that read nothing untrusted.
	policy string
	// why says what makes the call one the policy covers.
	why string
}

// held reports whether the call waits for a person's approval.
func (d decision) held() bool { return d.policy == commitlog.PolicyHeld }

// decide applies the agent's policy to a checked proposal.
func (a *Arbiter) decide(def *tool.Def, p Proposal) decision {
	d := decision{sources: a.prov.of(p.Owner.String())}
	if len(d.sources) == 0 {
		return d
	}
	d.why = a.covers(def, p, d.sources)
	pol := a.untrusted()
	switch {
	case d.why == "":
		d.policy = commitlog.PolicyNotCovered
	case allowlisted(pol.Allow, def, p.Input):
		d.policy = commitlog.PolicyAllowlisted
	case pol.Effective() == config.UntrustedAllow:
		d.policy = commitlog.PolicyOptedOut
	case pol.Effective() == config.UntrustedRefuse:
		d.policy = commitlog.PolicyRefused
	default:
		d.policy = commitlog.PolicyHeld
	}
	return d
}

// untrusted is the agent's policy now.
func (a *Arbiter) untrusted() config.UntrustedInput {
	if a.cfg.Untrusted == nil {
		return config.UntrustedInput{}
	}
	return a.cfg.Untrusted()
}

// covers says why the policy covers a call of a lane holding srcs, or ""
// when it does not: the call may act, or it is a web request that carries
// data to a host the lane has not visited.
func (a *Arbiter) covers(def *tool.Def, p Proposal, srcs []string) string {
	switch p.Tool {
	case nameWebFetch, nameWebBrowse:
		host, carries := webRequest(p.Tool, p.Input)
		if carries != "" && !visited(srcs, host) {
			return fmt.Sprintf("it sends data (%s) to %s, a host this lane has not visited", carries, host)
		}
		return ""
	}
	if def.Kind() == tool.KindMeta {
		return "it proposes a change for a person to apply"
	}
	if def.SideEffect(p.Input) != tool.SideEffectRead {
		return "it may act (side effect " + string(def.SideEffect(p.Input)) + ")"
	}
	return ""
}

// webRequest returns the host a web call goes to, and what data the
// request carries ("" when none): a query string, or text typed into the
// page.
func webRequest(name string, input json.RawMessage) (host, carries string) {
	var in struct {
		URL     string `json:"url"`
		Actions []struct {
			Action string `json:"action"`
			URL    string `json:"url"`
			Text   string `json:"text"`
		} `json:"actions"`
	}
	json.Unmarshal(input, &in) //nolint:errcheck // validated against the schema
	urls := []string{in.URL}
	typed := false
	for _, act := range in.Actions {
		switch act.Action {
		case "navigate":
			urls = append(urls, act.URL)
		case "type":
			typed = true
		}
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			continue
		}
		if host == "" {
			host = u.Hostname()
		}
		if u.RawQuery != "" || u.User != nil {
			return u.Hostname(), "a query string"
		}
	}
	if typed && name == nameWebBrowse {
		if host == "" {
			host = "the open page"
		}
		return host, "text typed into the page"
	}
	return host, ""
}

// visited reports whether srcs hold a page of host.
func visited(srcs []string, host string) bool {
	if host == "" {
		return false
	}
	for _, s := range srcs {
		raw, ok := strings.CutPrefix(s, "web:")
		if !ok {
			continue
		}
		if u, err := url.Parse(raw); err == nil && strings.EqualFold(u.Hostname(), host) {
			return true
		}
	}
	return false
}

// allowlisted reports whether an allow entry lets the call run: "tool"
// allows every call of the tool, "tool:pattern" a call whose every target
// matches the pattern.
func allowlisted(allow []string, def *tool.Def, input json.RawMessage) bool {
	for _, e := range allow {
		name, pattern, hasTarget := strings.Cut(e, ":")
		if name != def.Name() {
			continue
		}
		if !hasTarget {
			return true
		}
		ts := targets(def.Name(), input)
		ok := len(ts) > 0
		for _, t := range ts {
			if m, err := path.Match(pattern, t); err != nil || !m {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// targets are what an allow entry's pattern is matched against: the
// workspace path of the file tools, every recipient of a mail, the host
// of a web request, the page or database of a Notion call. Other tools
// have none, so only a bare "tool" entry allows them.
func targets(name string, input json.RawMessage) []string {
	var in struct {
		Path       string   `json:"path"`
		To         []string `json:"to"`
		Cc         []string `json:"cc"`
		Bcc        []string `json:"bcc"`
		PageID     string   `json:"page_id"`
		DatabaseID string   `json:"database_id"`
	}
	json.Unmarshal(input, &in) //nolint:errcheck // validated against the schema
	switch {
	case strings.HasPrefix(name, "choir.fs."):
		if in.Path != "" {
			return []string{path.Clean(in.Path)}
		}
	case name == "choir.email.send":
		var out []string
		for _, r := range append(append(in.To, in.Cc...), in.Bcc...) {
			out = append(out, catalog.Address(r))
		}
		return out
	case name == nameWebFetch || name == nameWebBrowse:
		if host, _ := webRequest(name, input); host != "" {
			return []string{host}
		}
	case name == tool.NameNotionQuery:
		for _, id := range []string{in.PageID, in.DatabaseID} {
			if id != "" {
				return []string{id}
			}
		}
	}
	return nil
}

// refusal is the rejection of a call the policy refuses.
func refusal(p Proposal, d decision) *Rejection {
	return &Rejection{Kind: "untrusted_input", Tool: p.Tool, Message: fmt.Sprintf(
		"%s was refused: %s, and this lane has read what others wrote (%s), which may be what asks for it. "+
			"The agent's untrusted_input policy is refuse; nothing ran. Ask the user to do it, or to allow it in the agent's config.",
		p.Tool, d.why, strings.Join(d.sources, ", "))}
}
