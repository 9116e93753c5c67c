package notion_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/notion"
	"github.com/choirhq/choir/agent/tool/notion/notiontest"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"github.com/choirhq/choir/internal/logbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	*tooltest.Bundle
	fake   *notiontest.Server
	log    *logbuf.Buffer
	mu     sync.Mutex
	slept  []time.Duration
	secret string
}

// setup builds a registry holding choir.notion.query against a fresh fake,
// with an environment whose binding reference answers the fake's token.
func setup(t *testing.T) *testBundle {
	t.Helper()
	tb := &testBundle{fake: notiontest.NewServer(t), log: &logbuf.Buffer{}}
	tb.secret = tb.fake.Token
	cfg := notion.Config{BaseURL: tb.fake.URL(), Logger: slog.New(slog.NewTextHandler(tb.log, nil)),
		SleepFunc: func(_ context.Context, d time.Duration) error {
			tb.mu.Lock()
			defer tb.mu.Unlock()
			tb.slept = append(tb.slept, d)
			return nil
		}}
	tb.Bundle = tooltest.Setup(t, builtin.Config{Notion: cfg})
	tb.Env.SecretFunc = func(name string) (string, bool) {
		if name == tool.SecretNotion && tb.secret != "" {
			return tb.secret, true
		}
		return "", false
	}
	return tb
}

type item struct {
	Object     string         `json:"object"`
	ID         string         `json:"id"`
	Title      string         `json:"title"`
	URL        string         `json:"url"`
	Properties map[string]any `json:"properties"`
}

type listOut struct {
	DatabaseID string `json:"database_id"`
	Results    []item `json:"results"`
	NextCursor string `json:"next_cursor"`
	HasMore    bool   `json:"has_more"`
}

func ok(t *testing.T, r tool.Result) {
	t.Helper()
	if r.Status != tool.StatusSuccess {
		t.Fatalf("status %s: %s", r.Status, r.Summary)
	}
}

func TestSearchPagesThroughResultsAndReturnsIDs(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	r := tb.MustCall(t, notion.Name, `{"action": "search", "query": "", "limit": 5}`)
	ok(t, r)
	out := tooltest.Output[listOut](t, r)
	if len(out.Results) != 5 || !out.HasMore || out.NextCursor == "" {
		t.Fatalf("want 5 results and a cursor (the fake pages by 2): %+v", out)
	}
	r = tb.MustCall(t, notion.Name, `{"action": "search", "query": "", "cursor": "`+out.NextCursor+`"}`)
	ok(t, r)
	rest := tooltest.Output[listOut](t, r)
	if len(rest.Results) != 2 || rest.HasMore {
		t.Fatalf("continuation: %+v", rest)
	}

	r = tb.MustCall(t, notion.Name, `{"action": "search", "query": "tasks", "object": "database"}`)
	ok(t, r)
	out = tooltest.Output[listOut](t, r)
	if len(out.Results) != 1 || out.Results[0].ID != notiontest.DatabaseID || out.Results[0].Object != "database" || out.Results[0].Title != "Tasks" {
		t.Fatalf("database search: %+v", out)
	}
	r = tb.MustCall(t, notion.Name, `{"action": "search", "query": "travel", "object": "page"}`)
	out = tooltest.Output[listOut](t, r)
	if len(out.Results) != 1 || out.Results[0].ID != notiontest.PageID || out.Results[0].Title != "Travel plans" || out.Results[0].URL == "" {
		t.Fatalf("page search: %+v", out)
	}
}

func TestReadPageFlattensBlocks(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	// The id as a page URL, without dashes: the tool finds it.
	r := tb.MustCall(t, notion.Name, `{"action": "read_page", "page_id": "https://www.notion.so/Travel-plans-`+
		strings.ReplaceAll(notiontest.PageID, "-", "")+`?pvs=4"}`)
	ok(t, r)
	out := tooltest.Output[struct {
		PageID   string `json:"page_id"`
		Title    string `json:"title"`
		Text     string `json:"text"`
		Blocks   int    `json:"blocks"`
		Children []struct {
			Object, ID, Title string
		} `json:"children"`
	}](t, r)
	want := strings.Join([]string{
		"# Lisbon trip",
		"Flights are booked.",
		"- Hotels",
		"  - Alfama guesthouse",
		`[page "Packing list", id ` + notiontest.SubPageID + `]`,
		`[database "Tasks", id ` + notiontest.DatabaseID + `]`,
		"[x] Renew passport",
	}, "\n")
	if out.Text != want {
		t.Errorf("text:\n%s\nwant:\n%s", out.Text, want)
	}
	if out.PageID != notiontest.PageID || out.Title != "Travel plans" || out.Blocks != 7 {
		t.Errorf("page %+v", out)
	}
	if len(out.Children) != 2 || out.Children[0].ID != notiontest.SubPageID || out.Children[1].ID != notiontest.DatabaseID || out.Children[1].Object != "database" {
		t.Errorf("children %+v", out.Children)
	}
	if strings.Contains(out.Text, "Socks") {
		t.Error("a child page's content was inlined")
	}
}

func TestQueryDatabaseFiltersAndSorts(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	r := tb.MustCall(t, notion.Name, `{"action": "query_database", "database_id": "`+strings.ReplaceAll(notiontest.DatabaseID, "-", "")+`",
		"filter": {"property": "Status", "status": {"equals": "Done"}},
		"sorts": [{"property": "Priority", "direction": "descending"}]}`)
	ok(t, r)
	out := tooltest.Output[listOut](t, r)
	if out.DatabaseID != notiontest.DatabaseID || len(out.Results) != 2 {
		t.Fatalf("query: %+v", out)
	}
	if out.Results[0].Title != "Renew passport" || out.Results[1].Title != "Book flights" {
		t.Errorf("order: %+v", out.Results)
	}
	p := out.Results[0].Properties
	if p["Status"] != "Done" || p["Priority"] != 2.0 || p["Name"] != "Renew passport" {
		t.Errorf("properties %v", p)
	}
	if tags, _ := p["Tags"].([]any); len(tags) != 1 || tags[0] != "trip" {
		t.Errorf("multi_select %v", p["Tags"])
	}

	// All rows, across the fake's pages of two.
	r = tb.MustCall(t, notion.Name, `{"action": "query_database", "database_id": "`+notiontest.DatabaseID+`", "limit": 100}`)
	if out := tooltest.Output[listOut](t, r); len(out.Results) != 4 || out.HasMore {
		t.Errorf("all rows: %+v", out)
	}
}

func TestAppendAddsParagraphsAndReadsBack(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	r := tb.MustCall(t, notion.Name, `{"action": "append", "page_id": "`+notiontest.SubPageID+`", "text": "Sunscreen.\n\nA charger."}`)
	ok(t, r)
	out := tooltest.Output[struct {
		PageID   string   `json:"page_id"`
		Appended int      `json:"appended"`
		BlockIDs []string `json:"block_ids"`
	}](t, r)
	if out.PageID != notiontest.SubPageID || out.Appended != 2 || len(out.BlockIDs) != 2 || out.BlockIDs[0] != "new-1" {
		t.Fatalf("append: %+v", out)
	}
	r = tb.MustCall(t, notion.Name, `{"action": "append", "page_id": "`+notiontest.SubPageID+`",
		"blocks": [{"object": "block", "type": "to_do", "to_do": {"rich_text": [{"type": "text", "text": {"content": "Tickets"}}]}}]}`)
	ok(t, r)
	r = tb.MustCall(t, notion.Name, `{"action": "read_page", "page_id": "`+notiontest.SubPageID+`"}`)
	text := tooltest.Output[struct {
		Text string `json:"text"`
	}](t, r).Text
	// The fake stores blocks as sent: their rich text has no plain_text,
	// as Notion's own answers would; only the paragraph lines' markers
	// and the first, fake-made block are checked by content.
	if !strings.HasPrefix(text, "Socks (must not appear inline)\n") || strings.Count(text, "\n") != 3 {
		t.Errorf("page after append:\n%s", text)
	}
}

func TestRateLimitIsWaitedOutAsRetryAfterSays(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.fake.RateLimit(2)
	r := tb.MustCall(t, notion.Name, `{"action": "search", "query": "travel"}`)
	ok(t, r)
	if len(tb.slept) != 2 || tb.slept[0] != 2*time.Second || tb.slept[1] != 2*time.Second {
		t.Errorf("waited %v, want 2s twice (Retry-After: 2)", tb.slept)
	}
	if !strings.Contains(tb.log.String(), "notion rate limited") {
		t.Errorf("no log line: %s", tb.log)
	}

	// Still limited after the retries: an error the model can act on.
	tb.fake.RateLimit(100)
	r = tb.MustCall(t, notion.Name, `{"action": "search", "query": "travel"}`)
	if r.Status != tool.StatusError || !strings.Contains(r.Summary, "rate limiting") || !strings.Contains(r.Summary, "try again in 2s") {
		t.Errorf("persistent 429: %+v", r)
	}
}

func TestBadInputGetsAStructuredError(t *testing.T) {
	t.Parallel()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String() + "/v1"
	dead.Close()

	tests := []struct {
		name, input, secret, baseURL, want, log string
	}{
		{name: "MissingSecret", input: `{"action": "search"}`, want: "no Notion integration secret", log: "without an integration secret"},
		{name: "InvalidSecret", input: `{"action": "search"}`, secret: "secret_wrong", want: "refused the integration's secret", log: "unauthorized"},
		{name: "UnreachableServer", input: `{"action": "search"}`, baseURL: deadURL, want: "unreachable", log: "notion call failed"},
		{name: "PageNotShared", input: `{"action": "read_page", "page_id": "ffffffffffffffffffffffffffffffff"}`, want: "not shared with the integration", log: "object_not_found"},
		{name: "NotAnID", input: `{"action": "read_page", "page_id": "my page"}`, want: "is not a Notion id"},
		{name: "BadFilter", input: `{"action": "query_database", "database_id": "` + notiontest.DatabaseID + `", "filter": {"property": "Status"}}`, want: "validation_error", log: "validation_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			switch tt.name {
			case "MissingSecret":
				tb.secret = ""
			case "InvalidSecret":
				tb.secret = tt.secret
			}
			if tt.baseURL != "" {
				tb.Bundle = tooltest.Setup(t, builtin.Config{Notion: notion.Config{BaseURL: tt.baseURL,
					Logger: slog.New(slog.NewTextHandler(tb.log, nil))}})
				tb.Env.SecretFunc = func(string) (string, bool) { return "secret_fake", true }
			}
			r := tb.MustCall(t, notion.Name, tt.input)
			if r.Status != tool.StatusError || !strings.Contains(r.Summary, tt.want) {
				t.Errorf("got %s %q, want an error containing %q", r.Status, r.Summary, tt.want)
			}
			if tt.log != "" && !strings.Contains(tb.log.String(), tt.log) {
				t.Errorf("log lacks %q:\n%s", tt.log, tb.log)
			}
		})
	}
}

// TestRealNotion talks to the real API when CHOIR_TEST_NOTION_TOKEN holds
// an integration token (never in CI).
func TestRealNotion(t *testing.T) {
	t.Parallel()
	token := os.Getenv("CHOIR_TEST_NOTION_TOKEN")
	if token == "" || os.Getenv("CI") != "" {
		t.Skip("skipped: set CHOIR_TEST_NOTION_TOKEN (outside CI) to search the real Notion API")
	}
	b := tooltest.Setup(t, builtin.Config{Notion: notion.Config{}})
	b.Env.SecretFunc = func(name string) (string, bool) { return token, name == tool.SecretNotion }
	r := b.MustCall(t, notion.Name, `{"action": "search", "query": "", "limit": 3}`)
	ok(t, r)
	t.Logf("real Notion: %s", r.Summary)
}
