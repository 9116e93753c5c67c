package console

import (
	"encoding/csv"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/daemon/usage"
	"github.com/choirhq/choir/rpc/admin"
)

// Charts are drawn here, as SVG in the page: a bar a day and the day cap
// as a line. A chart library would bring far more than these two shapes
// need (and most draw with JavaScript); this is a few rectangles, a line
// and their labels, all with presentation attributes, so that the
// Content-Security-Policy's style-src stays 'self'.

// usageDays is how many days the usage page shows unless asked.
const usageDays = 30

// usageView is the usage page: a report and two charts per agent.
type usageView struct {
	Days   int
	Agents []agentUsage
}

type agentUsage struct {
	Report        admin.UsageReport
	Err           string
	Cost, Tokens  chart
	DaysWithSpend int
	// ByService and ByLane share the days' spend out.
	ByService, ByLane shares
}

// shares is a horizontal bar chart: what each model, service or lane
// spent over the days, as a share of the largest.
type shares struct {
	Title         string
	Width, Height int
	Rows          []shareRow
}

type shareRow struct {
	Name, Label string
	Y, W        float64
}

// Geometry of a shares chart: a row per slice, names on the left.
const (
	shareRowHeight = 20
	shareNameWidth = 200
	shareBarWidth  = 320
)

// shareChart draws slices by cost, or by tokens when none cost anything.
func shareChart(title string, slices []admin.UsageSlice) shares {
	c := shares{Title: title, Width: shareNameWidth + shareBarWidth + 260, Height: max(len(slices), 1) * shareRowHeight}
	value := func(s admin.UsageSlice) float64 { return s.CostUSD }
	top := 0.0
	for _, s := range slices {
		top = math.Max(top, s.CostUSD)
	}
	if top == 0 {
		value = func(s admin.UsageSlice) float64 { return float64(s.Tokens) }
		for _, s := range slices {
			top = math.Max(top, float64(s.Tokens))
		}
	}
	for i, s := range slices {
		w := 0.0
		if top > 0 {
			w = value(s) / top * shareBarWidth
		}
		c.Rows = append(c.Rows, shareRow{Name: s.Name, Y: float64(i * shareRowHeight), W: w,
			Label: fmt.Sprintf("$%.4f · %d tokens · %d uses", s.CostUSD, s.Tokens, s.Uses)})
	}
	return c
}

// chart is a bar chart of one series over the days, with its cap.
type chart struct {
	Title         string
	Width, Height int
	Bars          []bar
	// Cap is the cap's line, nil without a cap.
	Cap   *capLine
	Ticks []tick
	Max   string
}

type bar struct {
	X, Y, W, H float64
	Label      string
}

type capLine struct {
	Y     float64
	Label string
}

type tick struct {
	X     float64
	Label string
}

// Chart geometry: the plot's size and the room left for labels.
const (
	chartWidth  = 720
	chartHeight = 160
	chartTop    = 14
	chartBottom = 18
)

// dayChart draws values (one a day, oldest first, for days ending on
// today) as bars, with limit (0: none) as the cap's line.
func dayChart(title string, days []string, values []float64, limit float64, format func(float64) string) chart {
	c := chart{Title: title, Width: chartWidth, Height: chartHeight}
	top := limit
	for _, v := range values {
		top = math.Max(top, v)
	}
	if top <= 0 {
		top = 1
	}
	top *= 1.1
	plot := float64(chartHeight - chartTop - chartBottom)
	step := float64(chartWidth) / float64(max(len(values), 1))
	for i, v := range values {
		h := v / top * plot
		c.Bars = append(c.Bars, bar{X: float64(i)*step + 1, Y: chartTop + plot - h, W: math.Max(step-2, 1), H: h,
			Label: days[i] + ": " + format(v)})
		if i%7 == len(values)%7 || i == len(values)-1 {
			c.Ticks = append(c.Ticks, tick{X: float64(i) * step, Label: days[i][5:]})
		}
	}
	if limit > 0 {
		c.Cap = &capLine{Y: chartTop + plot - limit/top*plot, Label: "cap " + format(limit)}
	}
	c.Max = format(top / 1.1)
	return c
}

// lastDays lists the n days ending on today (YYYY-MM-DD), oldest first.
func lastDays(today string, n int) []string {
	t, err := time.Parse(time.DateOnly, today)
	if err != nil {
		return nil
	}
	out := make([]string, n)
	for i := range n {
		out[i] = t.AddDate(0, 0, i-n+1).Format(time.DateOnly)
	}
	return out
}

// dayCap is the report's day cap on money or tokens, 0 when none.
func dayCap(r admin.UsageReport, money bool) float64 {
	for _, c := range r.Caps {
		if c.Scope == "day" && c.Money == money {
			return c.Limit
		}
	}
	return 0
}

// usageDaysParam reads ?days=, 1 to admin's maximum.
func usageDaysParam(r *http.Request) (int, error) {
	s := r.URL.Query().Get("days")
	if s == "" {
		return usageDays, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > usage.MaxDays {
		return 0, fmt.Errorf("?days=%q: want a number of days from 1 to %d", s, usage.MaxDays)
	}
	return n, nil
}

// usageRequest reads a usage request: its days, and the agents the
// session sees. It answers the request itself when it cannot be served.
func (c *Console) usageRequest(w http.ResponseWriter, r *http.Request, sess login.Session) (int, []admin.AgentStatus, bool) {
	if c.o.Usage == nil {
		c.fail(w, r, http.StatusServiceUnavailable, "this choird keeps no usage report")
		return 0, nil, false
	}
	n, err := usageDaysParam(r)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return 0, nil, false
	}
	list, err := c.o.Control.AgentList(r.Context(), sess.Scope())
	if err != nil {
		c.failErr(w, r, err)
		return 0, nil, false
	}
	return n, list, true
}

// usagePage shows each agent's spend and tokens a day as charts, with
// the day caps drawn on them.
func (c *Console) usagePage(w http.ResponseWriter, r *http.Request, sess login.Session) {
	n, list, ok := c.usageRequest(w, r, sess)
	if !ok {
		return
	}
	v := usageView{Days: n}
	for _, a := range list {
		u := agentUsage{}
		rep, err := c.o.Usage.Report(r.Context(), a.AgentID, n)
		if err != nil {
			u.Err = err.Error()
			u.Report.AgentID = a.AgentID
			v.Agents = append(v.Agents, u)
			continue
		}
		u.Report = rep
		days := lastDays(rep.Today, n)
		cost, tokens := make([]float64, n), make([]float64, n)
		for _, d := range rep.Days {
			for i, day := range days {
				if day == d.Day {
					cost[i], tokens[i] = d.CostUSD, float64(d.Tokens)
					u.DaysWithSpend++
				}
			}
		}
		u.Cost = dayChart("Spend a day (US dollars)", days, cost, dayCap(rep, true), func(f float64) string {
			return "$" + strconv.FormatFloat(f, 'f', 2, 64)
		})
		u.Tokens = dayChart("Tokens a day", days, tokens, dayCap(rep, false), func(f float64) string {
			return strconv.FormatInt(int64(f), 10)
		})
		if b, err := c.o.Usage.Breakdown(r.Context(), a.AgentID, n); err != nil {
			u.Err = err.Error()
		} else {
			u.ByService = shareChart("By model and service", b.ByService)
			u.ByLane = shareChart("By lane (the edge, each core job)", b.ByLane)
		}
		v.Agents = append(v.Agents, u)
	}
	p := c.base(r.Context(), sess, "Usage", "usage")
	p.Data = v
	c.render(w, r, http.StatusOK, "usage.html", p)
}

// usageCSV is every agent's spend a day as CSV: agent, day, tokens,
// cost_usd, uses, in each agent's own time zone's days.
func (c *Console) usageCSV(w http.ResponseWriter, r *http.Request, sess login.Session) {
	n, list, ok := c.usageRequest(w, r, sess)
	if !ok {
		return
	}
	rows := [][]string{{"agent_id", "time_zone", "day", "tokens", "cost_usd", "uses"}}
	for _, a := range list {
		rep, err := c.o.Usage.Report(r.Context(), a.AgentID, n)
		if err != nil {
			c.failErr(w, r, err)
			return
		}
		for _, d := range rep.Days {
			rows = append(rows, []string{a.AgentID, rep.TimeZone, d.Day, strconv.FormatInt(d.Tokens, 10),
				strconv.FormatFloat(d.CostUSD, 'f', -1, 64), strconv.FormatInt(d.Uses, 10)})
		}
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="choir-usage-%ddays.csv"`, n))
	cw := csv.NewWriter(w)
	cw.WriteAll(rows) //nolint:errcheck // the client went away
}
