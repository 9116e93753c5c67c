package console

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/rpc/admin"
)

// auditView is the audit page: its filters as asked, and the calls.
type auditView struct {
	Agent, Tool, Outcome, Since, Until string
	Limit                              int
	Agents                             []string
	Outcomes                           []string
	Calls                              []admin.AuditCall
}

// auditOutcomes are the outcomes the filter offers: a call's result
// status, one still running, and a request refused before it ran.
var auditOutcomes = []string{"success", "error", "in_doubt", "running", "rejected", "abandoned"}

// auditTimeLayouts are the times a filter takes, in UTC.
var auditTimeLayouts = []string{"2006-01-02T15:04", "2006-01-02", time.RFC3339}

func parseAuditTime(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, l := range auditTimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("?%s=%q: want a time like 2026-11-29 or 2026-11-29T14:30 (UTC)", name, s)
}

// audit lists tool calls and refused requests, newest first, filtered by
// agent, tool, outcome and time (control.AuditCalls: choir_audit.tool_calls,
// as psql shows it). Each call links to its place in its session's replay.
func (c *Console) audit(w http.ResponseWriter, r *http.Request, sess login.Session) {
	q := r.URL.Query()
	v := auditView{Agent: q.Get("agent"), Tool: q.Get("tool"), Outcome: q.Get("outcome"), Since: q.Get("since"),
		Until: q.Get("until"), Outcomes: auditOutcomes}
	req := admin.AuditRequest{AgentID: v.Agent, Tool: v.Tool, Outcome: v.Outcome}
	var err error
	if req.Since, err = parseAuditTime("since", v.Since); err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if req.Until, err = parseAuditTime("until", v.Until); err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if s := q.Get("limit"); s != "" {
		if req.Limit, err = strconv.Atoi(s); err != nil {
			c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("?limit=%q is no number", s))
			return
		}
	}
	if err := req.Validate(); err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	calls, err := c.o.Audit.Calls(r.Context(), sess.Scope(), req)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	list, err := c.o.Control.AgentList(r.Context(), sess.Scope())
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	for _, a := range list {
		v.Agents = append(v.Agents, a.AgentID)
	}
	v.Calls, v.Limit = calls, req.Limit
	p := c.base(r.Context(), sess, "Audit", "audit")
	p.Data = v
	c.render(w, r, http.StatusOK, "audit.html", p)
}
