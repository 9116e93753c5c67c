package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/daemon/usage"
	"github.com/choirhq/choir/internal/verbatim"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
)

// decidedWindow is how far back the approvals page lists decided ones.
const decidedWindow = 48 * time.Hour

// feedUsageAge is how stale a usage report the live feed shows.
const feedUsageAge = 2 * time.Second

// usageCache keeps each agent's latest usage report (today's only).
type usageCache struct {
	mu   sync.Mutex
	last map[string]usageRead
}

type usageRead struct {
	report admin.UsageReport
	at     time.Time
}

// report is the agent's report of today, read again when older than age.
func (u *usageCache) report(ctx context.Context, s *usage.Service, agentID string, age time.Duration) (admin.UsageReport, error) {
	u.mu.Lock()
	r, ok := u.last[agentID]
	u.mu.Unlock()
	if ok && age > 0 && time.Since(r.at) < age {
		return r.report, nil
	}
	rep, err := s.Report(ctx, agentID, 1)
	if err != nil {
		return rep, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.last == nil {
		u.last = map[string]usageRead{}
	}
	u.last[agentID] = usageRead{report: rep, at: time.Now()}
	return rep, nil
}

// page is what every page's template gets.
type page struct {
	Title string
	// Nav is the page's entry in the navigation ("overview", "approvals").
	Nav     string
	CSRF    string
	Actor   string
	Pending int
	Notice  string
	Data    any
}

// agentView is one agent on the overview: its status, its lanes read as
// the DM and choirctl read them, and today's spend against its caps.
type agentView struct {
	admin.AgentStatus
	Lanes    []laneView
	Usage    *admin.UsageReport
	UsageErr string
}

type laneView struct {
	Lane, Headline, Progress, Budget string
}

// approvalsView is the approvals page: pending ones, oldest first, and
// those decided in decidedWindow, newest first.
type approvalsView struct {
	Pending, Decided []admin.Approval
}

// approvalView is one approval with its payload laid out.
type approvalView struct {
	admin.Approval
	Blocks []payloadBlock
}

var funcs = template.FuncMap{
	"ago": func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return "—"
		}
		return time.Since(*t).Round(time.Second).String() + " ago"
	},
	"uptime": func(a admin.AgentStatus) string {
		if a.StartedAt == nil || (a.State != admin.AgentActive && a.State != admin.AgentStarting) {
			return "—"
		}
		return time.Since(*a.StartedAt).Round(time.Second).String()
	},
	"when": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"whenp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"amount": func(v float64, money bool) string {
		if money {
			return fmt.Sprintf("$%.4f", v)
		}
		return fmt.Sprintf("%d tokens", int64(v))
	},
	"usd":   func(v float64) string { return fmt.Sprintf("$%.4f", v) },
	"short": short,
	"sub":   func(a, b int) int { return a - b },
	"add":   func(a, b float64) float64 { return a + b },
}

// render writes the named template with status; a template that fails
// before writing anything is a 500.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	var buf bytes.Buffer
	if err := c.tmpl.ExecuteTemplate(&buf, name, p); err != nil {
		c.o.Logger.ErrorContext(r.Context(), "console template failed", slog.String("template", name), slog.String("error", err.Error()))
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes()) //nolint:errcheck // the client went away
}

// short is an id's first eight characters, as pages show it.
func short(id string) string { return id[:min(8, len(id))] }

// fail answers with a page that says what happened and what to do.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "message.html", page{Title: http.StatusText(status), Notice: msg})
}

// base is the page data every signed-in page shares.
func (c *Console) base(ctx context.Context, sess login.Session, title, nav string) page {
	p := page{Title: title, Nav: nav, CSRF: sess.CSRF, Actor: sess.Actor()}
	if pending, err := c.o.Approvals.List(ctx, sess.Scope(), ""); err == nil {
		p.Pending = len(pending)
	}
	return p
}

// agents is the overview's data. Usage reports older than usageAge are
// read again; a page asks with 0 (always fresh), the live feed with
// feedUsageAge, since spend is not what must show within a second and
// its report is the overview's slowest read.
func (c *Console) agents(ctx context.Context, sc control.Scope, usageAge time.Duration) ([]agentView, error) {
	list, err := c.o.Control.AgentList(ctx, sc)
	if err != nil {
		return nil, err
	}
	out := make([]agentView, 0, len(list))
	for _, a := range list {
		v := agentView{AgentStatus: a}
		for _, l := range a.Lanes {
			v.Lanes = append(v.Lanes, laneView{Lane: l.Lane, Headline: admin.LaneHeadline(l), Progress: strings.TrimSpace(l.Progress),
				Budget: admin.BudgetText(l.BudgetRemaining)})
		}
		if c.o.Usage != nil {
			if u, err := c.usage.report(ctx, c.o.Usage, a.AgentID, usageAge); err != nil {
				v.UsageErr = err.Error()
			} else {
				v.Usage = &u
			}
		}
		out = append(out, v)
	}
	return out, nil
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, sess login.Session) {
	p := c.base(r.Context(), sess, "Overview", "overview")
	agents, err := c.agents(r.Context(), sess.Scope(), 0)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	p.Data = agents
	c.render(w, r, http.StatusOK, "overview.html", p)
}

func (c *Console) approvals(w http.ResponseWriter, r *http.Request, sess login.Session) {
	p := c.base(r.Context(), sess, "Approvals", "approvals")
	sc := sess.Scope()
	pending, err := c.o.Approvals.List(r.Context(), sc, "")
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	recent, err := c.o.Approvals.FiledSince(r.Context(), sc, time.Now().Add(-decidedWindow))
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	v := approvalsView{Pending: pending}
	for _, a := range slices.Backward(recent) {
		if a.Status != "pending" {
			v.Decided = append(v.Decided, a)
		}
	}
	p.Pending, p.Data = len(pending), v
	c.render(w, r, http.StatusOK, "approvals.html", p)
}

func (c *Console) approval(w http.ResponseWriter, r *http.Request, sess login.Session) {
	a, err := c.o.Approvals.Show(r.Context(), sess.Scope(), r.PathValue("id"))
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	c.showApproval(w, r, sess, http.StatusOK, a, "")
}

// showApproval renders an approval the session's scope has been allowed
// to see: its payload and, for a proposal, the whole change.
func (c *Console) showApproval(w http.ResponseWriter, r *http.Request, sess login.Session, status int, a admin.Approval, notice string) {
	p := c.base(r.Context(), sess, "Approval "+a.ID[:min(8, len(a.ID))], "approvals")
	blocks := payloadBlocks(a.Payload)
	if c.o.Proposals != nil {
		text, ok, err := c.o.Proposals.Preview(r.Context(), a.ID)
		switch {
		case err != nil:
			c.o.Logger.WarnContext(r.Context(), "proposal text not shown", slog.String("approval_id", a.ID), slog.String("error", err.Error()))
			notice = strings.TrimSpace(notice + " The proposal's text could not be read: " + err.Error())
		case ok:
			blocks = append(blocks, textBlock("proposal", unquote(text)))
		}
	}
	p.Notice, p.Data = notice, approvalView{Approval: a, Blocks: blocks}
	c.render(w, r, status, "approval.html", p)
}

// decide approves or rejects through the approval service, with the
// session's scope: the same rules as choirctl and Telegram, and the same
// audit record, by console:<session>.
func (c *Console) decide(w http.ResponseWriter, r *http.Request, sess login.Session) {
	var approve bool
	switch r.PostFormValue("decision") {
	case "approve":
		approve = true
	case "reject":
	default:
		c.fail(w, r, http.StatusBadRequest, "The decision must be approve or reject.")
		return
	}
	id := r.PathValue("id")
	a, err := c.o.Approvals.Decide(r.Context(), sess.Scope(), id, approve)
	if errors.Is(err, approval.ErrResolved) {
		c.showApproval(w, r, sess, http.StatusConflict, a, "Not decided: "+err.Error()+".")
		return
	}
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	http.Redirect(w, r, "/approvals/"+a.ID, http.StatusSeeOther)
}

// failErr answers with the page for an error of the control layer or
// the approval service.
func (c *Console) failErr(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, control.ErrForbidden):
		c.fail(w, r, http.StatusForbidden, "Refused: "+err.Error())
	case errors.Is(err, choirsql.ErrNotFound), errors.Is(err, session.ErrUnknownResource):
		c.fail(w, r, http.StatusNotFound, "Not found: "+err.Error())
	case errors.Is(err, choirsql.ErrUnavailable), errors.Is(err, choirsql.ErrSerialization):
		c.fail(w, r, http.StatusServiceUnavailable, "choird cannot reach its database now; retry shortly.")
	default:
		if _, perr := approval.ParseID(r.PathValue("id")); r.PathValue("id") != "" && perr != nil {
			c.fail(w, r, http.StatusNotFound, "Not found: "+perr.Error())
			return
		}
		c.o.Logger.ErrorContext(r.Context(), "console request failed", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		c.fail(w, r, http.StatusInternalServerError, "choird could not answer: "+err.Error())
	}
}

// payloadBlock is one part of an approval's payload as the page shows it:
// a field's text, line by line, with a diff's lines marked.
type payloadBlock struct {
	Key   string
	Lines []payloadLine
}

type payloadLine struct {
	Class, Text string
}

// payloadBlocks lays out a payload: each field of an object whose value
// is text of several lines (a proposal's preview with its diff) as its
// own block, and the rest as indented JSON.
func payloadBlocks(raw json.RawMessage) []payloadBlock {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return []payloadBlock{textBlock("payload", indentJSON(raw))}
	}
	var out []payloadBlock
	rest := map[string]json.RawMessage{}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		var s string
		if json.Unmarshal(obj[k], &s) == nil && strings.Contains(s, "\n") {
			out = append(out, textBlock(k, s))
			continue
		}
		rest[k] = obj[k]
	}
	if len(rest) > 0 {
		b, _ := json.Marshal(rest)
		out = append([]payloadBlock{textBlock("payload", indentJSON(b))}, out...)
	}
	return out
}

func indentJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// unquote takes the quote bar off each quoted line of a proposal's text
// (verbatim.Lines): in the page the whole text is shown as text, never as
// markup, and a diff's lines are marked by what follows the bar. The
// characters verbatim spelled out stay spelled out.
func unquote(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, verbatim.Bar)
	}
	return strings.Join(lines, "\n")
}

// textBlock splits text into lines, marking a diff's lines when the text
// holds one.
func textBlock(key, text string) payloadBlock {
	isDiff := strings.Contains(text, "\n@@ ") || strings.Contains(text, "diff --git ")
	b := payloadBlock{Key: key}
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		b.Lines = append(b.Lines, payloadLine{Class: diffClass(l, isDiff), Text: l})
	}
	return b
}

func diffClass(l string, isDiff bool) string {
	switch {
	case !isDiff:
		return ""
	case strings.HasPrefix(l, "diff --git "), strings.HasPrefix(l, "index "), strings.HasPrefix(l, "+++ "), strings.HasPrefix(l, "--- "):
		return "meta"
	case strings.HasPrefix(l, "@@"):
		return "hunk"
	case strings.HasPrefix(l, "+"):
		return "add"
	case strings.HasPrefix(l, "-"):
		return "del"
	}
	return ""
}
