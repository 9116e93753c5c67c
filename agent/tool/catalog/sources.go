package catalog

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"

	"github.com/choirhq/choir/agent/tool"
)

// The kinds of untrusted source a lane can hold (issue 30). A source is
// "<kind>" or "<kind>:<detail>": "web:https://example.com/a",
// "mail:bob@ext.test", "notion:<page id>", "file:.choirtmp/recv/a.pdf",
// "mcp:<server>".
const (
	SourceWeb    = "web"
	SourceMail   = "mail"
	SourceNotion = "notion"
	SourceFile   = "file"
	SourceMCP    = "mcp"
)

// ReceivedDirs are the workspace directories that hold files received
// from outside: the DM's uploads (the gateway's .choirtmp/recv), mail
// attachments (choir.email.receive's mail/) and what choir.web.fetch
// saved (.choirtmp/downloads: a PDF read in a later session, or by a
// lane other than the one that fetched it, is still the page's words).
// What is read from them is a stranger's words, like a web page.
var ReceivedDirs = []string{".choirtmp/recv", "mail", tool.DownloadDir}

// received reports whether a workspace-relative path lies in a
// ReceivedDirs directory.
func received(p string) bool {
	p = strings.TrimPrefix(strings.TrimPrefix(p, "./"), "/")
	for _, d := range ReceivedDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// FileSources are the sources of choir.fs.read and choir.fs.search: a
// file received from outside, when the call read one (the input's path,
// or a match's path in the output).
func FileSources(input json.RawMessage, res tool.Result) []string {
	var in struct {
		Path string `json:"path"`
	}
	json.Unmarshal(input, &in) //nolint:errcheck // validated against the schema
	if in.Path != "" && received(in.Path) {
		return []string{SourceFile + ":" + in.Path}
	}
	var out []string
	for _, d := range ReceivedDirs {
		if strings.Contains(string(res.Output), `"`+d+`/`) && !slices.Contains(out, SourceFile+":"+d) {
			out = append(out, SourceFile+":"+d)
		}
	}
	return out
}

// ExecSources are choir.exec's: a command that names a directory of
// received files reads a stranger's words. It cannot see what a command
// reads by other means; a shell is the agent's own workspace (issue 30
// counts the workspace as trusted), and the egress gateway, not this,
// keeps a command from fetching the web.
func ExecSources(input json.RawMessage, _ tool.Result) []string {
	var in struct {
		Command string `json:"command"`
	}
	json.Unmarshal(input, &in) //nolint:errcheck // validated against the schema
	for _, d := range ReceivedDirs {
		if strings.Contains(in.Command, d+"/") || strings.Contains(in.Command, d+" ") || strings.HasSuffix(in.Command, d) {
			return []string{SourceFile + ":" + d}
		}
	}
	return nil
}

// WebSources are choir.web.fetch's and choir.web.browse's: the page's
// URL, or just "web" when the call named none (browse goes on in its tab).
func WebSources(input json.RawMessage, _ tool.Result) []string {
	var in struct {
		URL string `json:"url"`
	}
	json.Unmarshal(input, &in) //nolint:errcheck // validated against the schema
	if u, err := url.Parse(in.URL); err == nil && u.Host != "" {
		u.RawQuery, u.Fragment, u.User = "", "", nil
		return []string{SourceWeb + ":" + u.String()}
	}
	return []string{SourceWeb}
}

// NotionSources are choir.notion.query's: a page or database read, or a
// search's results; an append brings nothing in.
func NotionSources(input json.RawMessage, _ tool.Result) []string {
	var in struct {
		Action     string `json:"action"`
		PageID     string `json:"page_id"`
		DatabaseID string `json:"database_id"`
	}
	json.Unmarshal(input, &in) //nolint:errcheck // validated against the schema
	switch {
	case in.Action == "append":
		return nil
	case in.PageID != "":
		return []string{SourceNotion + ":" + in.PageID}
	case in.DatabaseID != "":
		return []string{SourceNotion + ":" + in.DatabaseID}
	}
	return []string{SourceNotion}
}

// MailSources are choir.email.receive's and choir.email.check's: "mail"
// and each sender whose message the result shows.
func MailSources(_ json.RawMessage, res tool.Result) []string {
	type msg struct {
		From string `json:"from"`
	}
	var out struct {
		Messages []msg `json:"messages"` // choir.email.receive
		Newest   []msg `json:"newest"`   // choir.email.check
	}
	json.Unmarshal(res.Output, &out) //nolint:errcheck // best effort: "mail" stands for any sender
	srcs := []string{SourceMail}
	for _, m := range append(out.Messages, out.Newest...) {
		if a := Address(m.From); a != "" && !slices.Contains(srcs, SourceMail+":"+a) {
			srcs = append(srcs, SourceMail+":"+a)
		}
	}
	return srcs
}

// Address is the lower-case address of a From or To header ("Bob
// <bob@ext.test>" or "bob@ext.test").
func Address(from string) string {
	if i := strings.LastIndexByte(from, '<'); i >= 0 {
		from = strings.TrimSuffix(from[i+1:], ">")
	}
	return strings.ToLower(strings.TrimSpace(from))
}
