package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/rpc/admin"
)

// sessionsListed is how many sessions the sessions page lists.
const sessionsListed = 200

// sessions lists the latest sessions, each linked to its replay.
func (c *Console) sessions(w http.ResponseWriter, r *http.Request, sess login.Session) {
	p := c.base(r.Context(), sess, "Sessions", "sessions")
	list, err := c.o.Control.SessionList(r.Context(), sess.Scope(), admin.SessionListRequest{Limit: sessionsListed})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	p.Data = list
	c.render(w, r, http.StatusOK, "sessions.html", p)
}

// replayView is a replay page: the page of the log, its events placed
// on their lanes' tracks, and the links to the pages beside it.
type replayView struct {
	admin.SessionReplay
	Rows []replayRow
	// Through is the last revision on the page.
	Through int64
	// Earlier is the previous page's first revision, 0 on the first.
	Earlier int64
	Limit   int
}

type replayRow struct {
	admin.ReplayEvent
	// Track is the index of the event's lane in Lanes.
	Track   int
	Pretty  string
	Problem bool
}

// replay shows a page of a session's log, verified against the hash
// chain as it is read (control.SessionReplay, the same as choirctl
// session replay): ?from= the first revision, ?limit= the page size.
func (c *Console) replay(w http.ResponseWriter, r *http.Request, sess login.Session) {
	req := admin.SessionReplayRequest{SessionID: r.PathValue("id")}
	for _, f := range []struct {
		name string
		set  func(int64)
	}{
		{"from", func(v int64) { req.From = v }},
		{"limit", func(v int64) { req.Limit = int(v) }},
	} {
		if s := r.URL.Query().Get(f.name); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("?%s=%q is no number", f.name, s))
				return
			}
			f.set(v)
		}
	}
	if err := req.Validate(); err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	out, err := c.o.Audit.SessionReplay(r.Context(), sess.Scope(), req)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	v := replayView{SessionReplay: out, Limit: req.Limit}
	if v.Limit == 0 {
		v.Limit = admin.DefaultReplayPage
	}
	if out.From > out.FirstRev {
		v.Earlier = max(out.From-int64(v.Limit), out.FirstRev)
	}
	for _, e := range out.Events {
		row := replayRow{ReplayEvent: e, Problem: e.Break != ""}
		for i, l := range out.Lanes {
			if l == e.Lane {
				row.Track = i
			}
		}
		var buf bytes.Buffer
		if json.Indent(&buf, e.Payload, "", "  ") == nil {
			row.Pretty = buf.String()
		} else {
			row.Pretty = string(e.Payload)
		}
		v.Rows = append(v.Rows, row)
		v.Through = e.Rev
	}
	p := c.base(r.Context(), sess, "Replay of "+short(out.SessionID), "sessions")
	p.Data = v
	c.render(w, r, http.StatusOK, "replay.html", p)
}
