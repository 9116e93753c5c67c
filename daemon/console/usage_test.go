package console_test

import (
	"encoding/csv"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// TestUsagePageChartsTheDays spends on two model calls of the assistant
// and finds today's bar in its spend chart, drawn to scale in SVG, and
// the day in the CSV download.
func TestUsagePageChartsTheDays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.d.StandIn(t, "assistant", admin.StartOverrides{})
	for _, cost := range []float64{0.25, 0.5} {
		a.Append(t, rpc.EventLLMCallCommitted, map[string]any{"model": "local", "lane": "edge", "prompt_tokens": 1000,
			"completion_tokens": 200, "latency_ms": 10, "cost_usd": cost})
	}
	c, _ := b.loggedIn(t)
	code, page := body(t, c, b.url+"/usage?days=7")
	if code != http.StatusOK || !strings.Contains(page, `id="usage-assistant"`) || !strings.Contains(page, `id="usage-helper"`) {
		t.Fatalf("usage: HTTP %d\n%s", code, page)
	}
	section := page[strings.Index(page, `id="usage-assistant"`):]
	section = section[:strings.Index(section, "</section>")]
	// Seven bars a chart; today's, the last, is the only one with spend,
	// and the highest: the plot's full height (less the top tenth).
	bars := regexp.MustCompile(`<rect class="bar" x="[0-9.]+" y="([0-9.]+)" width="[0-9.]+" height="([0-9.]+)" fill="#60a5fa"><title>([^<]*)</title>`).
		FindAllStringSubmatch(section, -1)
	if len(bars) != 14 {
		t.Fatalf("%d bars in two charts of seven days:\n%s", len(bars), section)
	}
	today := time.Now().Format(time.DateOnly)
	cost := bars[6]
	if h, _ := strconv.ParseFloat(cost[2], 64); h < 100 || !strings.HasPrefix(cost[3], today[:4]) || !strings.HasSuffix(cost[3], ": $0.75") {
		t.Errorf("today's spend bar: %q", cost[0])
	}
	for _, b := range append(bars[:6:6], bars[7:13]...) {
		if b[2] != "0" {
			t.Errorf("a day without spend has a bar: %q", b[0])
		}
	}
	if !strings.HasSuffix(bars[13][3], ": 2400") {
		t.Errorf("today's token bar: %q", bars[13][0])
	}

	// Shared out by model and by lane: one model, one lane here.
	for _, want := range []string{
		`<text x="0" y="0" dy="14" font-size="12" fill="#374151">llm:local</text>`,
		`<rect class="share" x="200" y="0" width="320" height="14" fill="#34d399"><title>llm:local: $0.7500 · 2400 tokens · 2 uses</title>`,
		`<text x="0" y="0" dy="14" font-size="12" fill="#374151">edge</text>`,
	} {
		if !strings.Contains(section, want) {
			t.Errorf("usage lacks %q", want)
		}
	}
	resp, err := c.Get(b.url + "/usage.csv?days=7")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	rows, err := csv.NewReader(strings.NewReader(string(raw))).ReadAll()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") ||
		len(rows) != 2 || strings.Join(rows[0], ",") != "agent_id,time_zone,day,tokens,cost_usd,uses" ||
		rows[1][0] != "assistant" || rows[1][3] != "2400" || rows[1][4] != "0.75" || rows[1][5] != "2" {
		t.Errorf("usage.csv: HTTP %d %v: %q", resp.StatusCode, err, raw)
	}
	if code, page := body(t, c, b.url+"/usage?days=0"); code != http.StatusBadRequest || !strings.Contains(page, "from 1 to 366") {
		t.Errorf("?days=0: HTTP %d\n%s", code, page)
	}
}
