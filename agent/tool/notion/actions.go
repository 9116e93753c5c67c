package notion

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/choirhq/choir/agent/tool"
)

// Bounds of read_page and append.
const (
	maxPageBlocks = 2000
	maxDepth      = 4
	appendBatch   = 100  // Notion takes at most 100 children per request
	maxRichText   = 2000 // characters of one rich_text element
)

// item is a search or query result: a page or a database.
type item struct {
	Object         string         `json:"object"`
	ID             string         `json:"id"`
	Title          string         `json:"title"`
	URL            string         `json:"url,omitempty"`
	LastEditedTime string         `json:"last_edited_time,omitempty"`
	Parent         map[string]any `json:"parent,omitempty"`
	Properties     map[string]any `json:"properties,omitempty"`
}

// object is the fields of a page or database the tool reads.
type object struct {
	Object         string                     `json:"object"`
	ID             string                     `json:"id"`
	URL            string                     `json:"url"`
	LastEditedTime string                     `json:"last_edited_time"`
	Parent         map[string]any             `json:"parent"`
	Properties     map[string]json.RawMessage `json:"properties"`
	Title          []richText                 `json:"title"` // databases
}

func toItem(raw json.RawMessage, withProps bool) (item, error) {
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		return item{}, fmt.Errorf("decode result: %w", err)
	}
	it := item{Object: o.Object, ID: o.ID, URL: o.URL, LastEditedTime: o.LastEditedTime, Parent: o.Parent}
	if o.Object == "database" {
		it.Title = plain(o.Title)
	} else {
		it.Title = pageTitle(o.Properties)
	}
	if withProps {
		it.Properties = make(map[string]any, len(o.Properties))
		for k, v := range o.Properties {
			it.Properties[k] = propertyValue(v)
		}
	}
	return it, nil
}

// listOutput is the answer to search and query_database.
type listOutput struct {
	DatabaseID string `json:"database_id,omitempty"`
	Results    []item `json:"results"`
	NextCursor string `json:"next_cursor,omitempty"`
	HasMore    bool   `json:"has_more"`
}

func (c *client) search(ctx context.Context, in input) (tool.Result, error) {
	results, next, err := collect(in.Limit, in.Cursor, func(cursor string, size int) (list, error) {
		body := map[string]any{"page_size": size}
		if in.Query != "" {
			body["query"] = in.Query
		}
		if in.Object != "" {
			body["filter"] = map[string]string{"property": "object", "value": in.Object}
		}
		if cursor != "" {
			body["start_cursor"] = cursor
		}
		var l list
		return l, c.do(ctx, "POST", "/search", body, &l)
	})
	if err != nil {
		return tool.Result{}, err
	}
	out := listOutput{Results: []item{}, NextCursor: next, HasMore: next != ""}
	for _, r := range results {
		it, err := toItem(r, false)
		if err != nil {
			return tool.Result{}, err
		}
		out.Results = append(out.Results, it)
	}
	return tool.SuccessResult(fmt.Sprintf("%d results for %q", len(out.Results), in.Query), out), nil
}

func (c *client) queryDatabase(ctx context.Context, in input) (tool.Result, error) {
	id, err := normalizeID("database_id", in.DatabaseID)
	if err != nil {
		return tool.ErrorResult("%v", err), nil
	}
	results, next, err := collect(in.Limit, in.Cursor, func(cursor string, size int) (list, error) {
		body := map[string]any{"page_size": size}
		if len(in.Filter) > 0 {
			body["filter"] = in.Filter
		}
		if len(in.Sorts) > 0 {
			body["sorts"] = in.Sorts
		}
		if cursor != "" {
			body["start_cursor"] = cursor
		}
		var l list
		return l, c.do(ctx, "POST", "/databases/"+id+"/query", body, &l)
	})
	if err != nil {
		return tool.Result{}, err
	}
	out := listOutput{DatabaseID: id, Results: []item{}, NextCursor: next, HasMore: next != ""}
	for _, r := range results {
		it, err := toItem(r, true)
		if err != nil {
			return tool.Result{}, err
		}
		out.Results = append(out.Results, it)
	}
	return tool.SuccessResult(fmt.Sprintf("%d rows of database %s", len(out.Results), id), out), nil
}

// pageOutput is the answer to read_page.
type pageOutput struct {
	PageID    string     `json:"page_id"`
	Title     string     `json:"title"`
	URL       string     `json:"url,omitempty"`
	Text      string     `json:"text"`
	Blocks    int        `json:"blocks"`
	Truncated bool       `json:"truncated,omitempty"`
	Children  []childRef `json:"children,omitempty"`
}

func (c *client) readPage(ctx context.Context, in input) (tool.Result, error) {
	id, err := normalizeID("page_id", in.PageID)
	if err != nil {
		return tool.ErrorResult("%v", err), nil
	}
	var page object
	if err := c.do(ctx, "GET", "/pages/"+id, nil, &page); err != nil {
		return tool.Result{}, err
	}
	r := &pageReader{c: c}
	if err := r.walk(ctx, id, 0); err != nil {
		return tool.Result{}, err
	}
	out := pageOutput{PageID: page.ID, Title: pageTitle(page.Properties), URL: page.URL,
		Text: strings.Join(r.lines, "\n"), Blocks: r.blocks, Truncated: r.truncated, Children: r.children}
	return tool.SuccessResult(fmt.Sprintf("page %q: %d blocks", out.Title, out.Blocks), out), nil
}

// pageReader flattens a page's block tree into lines, depth first.
type pageReader struct {
	c         *client
	lines     []string
	children  []childRef
	blocks    int
	truncated bool
}

func (r *pageReader) walk(ctx context.Context, id string, depth int) error {
	cursor := ""
	for {
		q := url.Values{"page_size": {"100"}}
		if cursor != "" {
			q.Set("start_cursor", cursor)
		}
		var l list
		if err := r.c.do(ctx, "GET", "/blocks/"+id+"/children?"+q.Encode(), nil, &l); err != nil {
			return err
		}
		for _, raw := range l.Results {
			if r.blocks >= maxPageBlocks {
				r.truncated = true
				return nil
			}
			bl, err := decodeBlock(raw)
			if err != nil {
				return err
			}
			r.blocks++
			line, child := bl.render()
			if child != nil {
				r.children = append(r.children, *child)
			}
			if line != "" {
				r.lines = append(r.lines, strings.Repeat("  ", depth)+strings.ReplaceAll(line, "\n", "\n"+strings.Repeat("  ", depth)))
			}
			// A child page or database is listed, not inlined: the model
			// reads it with its own call if it wants to.
			if bl.HasChildren && child == nil {
				if depth+1 >= maxDepth {
					r.truncated = true
					continue
				}
				if err := r.walk(ctx, bl.ID, depth+1); err != nil {
					return err
				}
			}
		}
		if !l.HasMore || l.NextCursor == nil || *l.NextCursor == "" {
			return nil
		}
		cursor = *l.NextCursor
	}
}

// appendOutput is the answer to append.
type appendOutput struct {
	PageID   string   `json:"page_id"`
	Appended int      `json:"appended"`
	BlockIDs []string `json:"block_ids"`
}

func (c *client) appendBlocks(ctx context.Context, in input) (tool.Result, error) {
	id, err := normalizeID("page_id", in.PageID)
	if err != nil {
		return tool.ErrorResult("%v", err), nil
	}
	children := in.Blocks
	if in.Text != "" {
		children = paragraphs(in.Text)
	}
	if len(children) == 0 {
		return tool.ErrorResult("nothing to append: give text or blocks"), nil
	}
	out := appendOutput{PageID: id, BlockIDs: []string{}}
	for start := 0; start < len(children); start += appendBatch {
		batch := children[start:min(start+appendBatch, len(children))]
		var l list
		if err := c.do(ctx, "PATCH", "/blocks/"+id+"/children", map[string]any{"children": batch}, &l); err != nil {
			if out.Appended > 0 {
				return tool.Result{}, fmt.Errorf("%d of %d blocks appended (block_ids %s), then: %w",
					out.Appended, len(children), strings.Join(out.BlockIDs, ","), err)
			}
			return tool.Result{}, err
		}
		// Notion answers with the page's children; those at the end are
		// the ones just appended.
		ids := make([]string, 0, len(l.Results))
		for _, raw := range l.Results {
			var b struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(raw, &b) == nil {
				ids = append(ids, b.ID)
			}
		}
		if len(ids) > len(batch) {
			ids = ids[len(ids)-len(batch):]
		}
		out.BlockIDs = append(out.BlockIDs, ids...)
		out.Appended += len(batch)
	}
	return tool.SuccessResult(fmt.Sprintf("appended %d blocks to page %s", out.Appended, id), out), nil
}

// paragraphs turns text into paragraph blocks, one per blank-line
// separated paragraph, each rich_text element within Notion's 2000
// characters.
func paragraphs(text string) []json.RawMessage {
	var out []json.RawMessage
	for _, p := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
		p = strings.Trim(p, "\n")
		if strings.TrimSpace(p) == "" {
			continue
		}
		var rts []map[string]any
		for p != "" {
			n := len(p)
			if utf8.RuneCountInString(p) > maxRichText {
				n = 0
				for i := 0; i < maxRichText; i++ {
					_, size := utf8.DecodeRuneInString(p[n:])
					n += size
				}
			}
			rts = append(rts, map[string]any{"type": "text", "text": map[string]string{"content": p[:n]}})
			p = p[n:]
		}
		b, _ := json.Marshal(map[string]any{"object": "block", "type": "paragraph", "paragraph": map[string]any{"rich_text": rts}})
		out = append(out, b)
	}
	return out
}
