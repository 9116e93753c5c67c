// Package notiontest is a local server speaking the Notion API's protocol,
// for tests: a bearer token, the Notion-Version header, the list shape with
// has_more and next_cursor (two results per page at most, so every test
// pages), Notion's error objects, and a 429 with Retry-After on demand. It
// holds a small workspace: the page "Travel plans" with nested blocks, its
// child page "Packing list" and its child database "Tasks" of four rows.
// It is for tests only.
package notiontest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/tool/notion"
)

// Server is the fake Notion API.
type Server struct {
	srv *httptest.Server
	// Token is the integration token it accepts.
	Token string

	mu        sync.Mutex
	pages     map[string]map[string]any // page id -> page object
	databases map[string]map[string]any
	children  map[string][]map[string]any // block or page id -> child blocks
	rows      map[string][]string         // database id -> page ids
	limited   int                         // answer this many next requests with 429
	requests  []string                    // "METHOD path"
	auths     []string
	bodies    []map[string]any
	nextID    int
}

// The ids of the workspace's page, its child page and its database.
const (
	PageID     = "1c2d3e4f-0000-4000-8000-000000000001"
	SubPageID  = "1c2d3e4f-0000-4000-8000-000000000002"
	DatabaseID = "1c2d3e4f-0000-4000-8000-0000000000db"
)

func title(s string) map[string]any {
	return map[string]any{"id": "title", "type": "title", "title": []any{rt(s)}}
}

func rt(s string) map[string]any {
	return map[string]any{"type": "text", "text": map[string]any{"content": s, "link": nil}, "plain_text": s, "href": nil,
		"annotations": map[string]any{"bold": false}}
}

func textBlock(id, typ, s string, hasChildren bool) map[string]any {
	return map[string]any{"object": "block", "id": id, "type": typ, "has_children": hasChildren,
		"created_time": "2026-11-01T10:00:00.000Z", typ: map[string]any{"rich_text": []any{rt(s)}, "color": "default"}}
}

// NewServer starts a server that the test's cleanup stops.
func NewServer(t testing.TB) *Server {
	t.Helper()
	f := &Server{Token: "secret_fake", pages: map[string]map[string]any{}, databases: map[string]map[string]any{},
		children: map[string][]map[string]any{}, rows: map[string][]string{}}
	f.pages[PageID] = map[string]any{"object": "page", "id": PageID, "url": "https://www.notion.so/Plans-" + strings.ReplaceAll(PageID, "-", ""),
		"last_edited_time": "2026-11-20T09:00:00.000Z", "parent": map[string]any{"type": "workspace", "workspace": true},
		"properties": map[string]any{"title": title("Travel plans")}}
	f.pages[SubPageID] = map[string]any{"object": "page", "id": SubPageID, "url": "https://www.notion.so/Packing",
		"parent": map[string]any{"type": "page_id", "page_id": PageID}, "properties": map[string]any{"title": title("Packing list")}}
	f.databases[DatabaseID] = map[string]any{"object": "database", "id": DatabaseID, "url": "https://www.notion.so/db", "title": []any{rt("Tasks")},
		"parent": map[string]any{"type": "page_id", "page_id": PageID}, "properties": map[string]any{}}
	f.children[PageID] = []map[string]any{
		textBlock("b1", "heading_1", "Lisbon trip", false),
		textBlock("b2", "paragraph", "Flights are booked.", false),
		textBlock("b3", "bulleted_list_item", "Hotels", true),
		{"object": "block", "id": SubPageID, "type": "child_page", "has_children": true, "child_page": map[string]any{"title": "Packing list"}},
		{"object": "block", "id": DatabaseID, "type": "child_database", "has_children": false, "child_database": map[string]any{"title": "Tasks"}},
		{"object": "block", "id": "b4", "type": "to_do", "has_children": false, "to_do": map[string]any{"rich_text": []any{rt("Renew passport")}, "checked": true}},
	}
	f.children["b3"] = []map[string]any{textBlock("b3a", "bulleted_list_item", "Alfama guesthouse", false)}
	f.children[SubPageID] = []map[string]any{textBlock("s1", "paragraph", "Socks (must not appear inline)", false)}
	for i, r := range []struct {
		name, status string
		prio         float64
	}{{"Book flights", "Done", 1}, {"Pack", "Not started", 3}, {"Renew passport", "Done", 2}, {"Buy adapter", "In progress", 4}} {
		id := fmt.Sprintf("1c2d3e4f-0000-4000-8000-00000000010%d", i)
		f.pages[id] = map[string]any{"object": "page", "id": id, "url": "https://www.notion.so/row" + strconv.Itoa(i),
			"parent": map[string]any{"type": "database_id", "database_id": DatabaseID},
			"properties": map[string]any{
				"Name":     title(r.name),
				"Status":   map[string]any{"id": "st", "type": "status", "status": map[string]any{"id": "x", "name": r.status, "color": "green"}},
				"Priority": map[string]any{"id": "pr", "type": "number", "number": r.prio},
				"Tags":     map[string]any{"id": "tg", "type": "multi_select", "multi_select": []any{map[string]any{"name": "trip"}}},
			}}
		f.rows[DatabaseID] = append(f.rows[DatabaseID], id)
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the API root, as notion.Config.BaseURL and a Notion
// integration's endpoint name it.
func (f *Server) URL() string { return f.srv.URL + "/v1" }

// RateLimit answers the next n requests with 429 and Retry-After: 2.
func (f *Server) RateLimit(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limited = n
}

// Requests returns "METHOD path" of every request so far.
func (f *Server) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// Authorizations returns the Authorization header of every request.
func (f *Server) Authorizations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auths...)
}

func notionError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"object": "error", "status": status, "code": code, "message": msg}) //nolint:errcheck
}

// page answers one page of a list: at most two results, and no more than
// page_size asks for.
func page(w http.ResponseWriter, all []any, cursor string, size int) {
	start, _ := strconv.Atoi(cursor)
	end := min(start+2, len(all))
	if size > 0 {
		end = min(end, start+size)
	}
	var next any
	if end < len(all) {
		next = strconv.Itoa(end)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "results": all[start:end], "next_cursor": next, //nolint:errcheck
		"has_more": next != nil, "type": "page_or_database"})
}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := strings.TrimPrefix(r.URL.Path, "/v1")
	f.requests = append(f.requests, r.Method+" "+path)
	f.auths = append(f.auths, r.Header.Get("Authorization"))
	var body map[string]any
	if r.Body != nil {
		json.NewDecoder(r.Body).Decode(&body) //nolint:errcheck
	}
	f.bodies = append(f.bodies, body)
	if r.Header.Get("Authorization") != "Bearer "+f.Token {
		notionError(w, 401, "unauthorized", "API token is invalid.")
		return
	}
	if r.Header.Get("Notion-Version") != notion.APIVersion {
		notionError(w, 400, "missing_version", "Notion-Version header failed validation.")
		return
	}
	if f.limited > 0 {
		f.limited--
		w.Header().Set("Retry-After", "2")
		notionError(w, 429, "rate_limited", "You have been rate limited. Please try again in a few minutes.")
		return
	}
	cursor, _ := body["start_cursor"].(string)
	size, _ := body["page_size"].(float64)
	if q := r.URL.Query().Get("page_size"); q != "" {
		n, _ := strconv.Atoi(q)
		size = float64(n)
	}
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case r.Method == "POST" && path == "/search":
		f.search(w, body, cursor, int(size))
	case r.Method == "GET" && len(seg) == 2 && seg[0] == "pages":
		p, ok := f.pages[seg[1]]
		if !ok {
			notionError(w, 404, "object_not_found", "Could not find page with ID: "+seg[1]+". Make sure the relevant pages and databases are shared with your integration.")
			return
		}
		json.NewEncoder(w).Encode(p) //nolint:errcheck
	case r.Method == "GET" && len(seg) == 3 && seg[0] == "blocks" && seg[2] == "children":
		kids, ok := f.children[seg[1]]
		if _, isPage := f.pages[seg[1]]; !ok && !isPage {
			notionError(w, 404, "object_not_found", "Could not find block with ID: "+seg[1]+".")
			return
		}
		page(w, anys(kids), r.URL.Query().Get("start_cursor"), int(size))
	case r.Method == "PATCH" && len(seg) == 3 && seg[0] == "blocks" && seg[2] == "children":
		f.append(w, seg[1], body)
	case r.Method == "POST" && len(seg) == 3 && seg[0] == "databases" && seg[2] == "query":
		f.query(w, seg[1], body, cursor, int(size))
	default:
		notionError(w, 400, "invalid_request_url", "Invalid request URL.")
	}
}

func anys[T any](s []T) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func (f *Server) search(w http.ResponseWriter, body map[string]any, cursor string, size int) {
	q, _ := body["query"].(string)
	var want string
	if flt, ok := body["filter"].(map[string]any); ok {
		want, _ = flt["value"].(string)
	}
	var all []any
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for k := range f.pages {
			if !yield(k) {
				return
			}
		}
	}) {
		p := f.pages[id]
		if want != "database" && strings.Contains(strings.ToLower(fmt.Sprint(p["properties"])), strings.ToLower(q)) {
			all = append(all, p)
		}
	}
	for _, d := range f.databases {
		if want != "page" && strings.Contains(strings.ToLower(fmt.Sprint(d["title"])), strings.ToLower(q)) {
			all = append(all, d)
		}
	}
	page(w, all, cursor, size)
}

func (f *Server) append(w http.ResponseWriter, id string, body map[string]any) {
	kids, _ := body["children"].([]any)
	if len(kids) == 0 || len(kids) > 100 {
		notionError(w, 400, "validation_error", "body.children should be an array of 1 to 100 blocks")
		return
	}
	for _, k := range kids {
		b, _ := k.(map[string]any)
		typ, _ := b["type"].(string)
		if typ == "" || b[typ] == nil {
			notionError(w, 400, "validation_error", "body.children[0].type should be defined")
			return
		}
		f.nextID++
		b["id"] = fmt.Sprintf("new-%d", f.nextID)
		b["has_children"] = false
		f.children[id] = append(f.children[id], b)
	}
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "results": anys(f.children[id]), "next_cursor": nil, "has_more": false}) //nolint:errcheck
}

// query implements the filter and sort shapes the tests use: a status
// equals filter and a number sort.
func (f *Server) query(w http.ResponseWriter, id string, body map[string]any, cursor string, size int) {
	ids, ok := f.rows[id]
	if !ok {
		notionError(w, 404, "object_not_found", "Could not find database with ID: "+id+".")
		return
	}
	var rows []map[string]any
	for _, rid := range ids {
		rows = append(rows, f.pages[rid])
	}
	if flt, ok := body["filter"].(map[string]any); ok {
		prop, _ := flt["property"].(string)
		st, ok := flt["status"].(map[string]any)
		if !ok || prop == "" {
			notionError(w, 400, "validation_error", "body failed validation: body.filter.status should be defined")
			return
		}
		rows = slices.DeleteFunc(rows, func(p map[string]any) bool {
			v := p["properties"].(map[string]any)[prop].(map[string]any)["status"].(map[string]any)["name"]
			return v != st["equals"]
		})
	}
	if sorts, ok := body["sorts"].([]any); ok && len(sorts) > 0 {
		s := sorts[0].(map[string]any)
		prop, dir := s["property"].(string), s["direction"]
		slices.SortFunc(rows, func(a, b map[string]any) int {
			x := a["properties"].(map[string]any)[prop].(map[string]any)["number"].(float64)
			y := b["properties"].(map[string]any)[prop].(map[string]any)["number"].(float64)
			if dir == "descending" {
				x, y = y, x
			}
			return int(x - y)
		})
	}
	page(w, anys(rows), cursor, size)
}

// Count returns how many blocks under the block or page id hold text in
// their content: how many times an append of text took effect.
func (f *Server) Count(id, text string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, b := range f.children[id] {
		if raw, err := json.Marshal(b); err == nil && strings.Contains(string(raw), text) {
			n++
		}
	}
	return n
}

// AddParagraph appends a paragraph holding text to the page or block id,
// as another editor of a shared page would.
func (f *Server) AddParagraph(id, text string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	f.children[id] = append(f.children[id], textBlock(fmt.Sprintf("p-%d", f.nextID), "paragraph", text, false))
}
