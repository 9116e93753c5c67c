package notion

import (
	"encoding/json"
	"fmt"
	"strings"
)

// richText is one element of a Notion rich_text array; plain_text is all
// the tool reads of it.
type richText struct {
	PlainText string `json:"plain_text"`
	Href      string `json:"href"`
}

func plain(rt []richText) string {
	var b strings.Builder
	for _, r := range rt {
		b.WriteString(r.PlainText)
	}
	return b.String()
}

// block is a Notion block: its type names the key that holds its content.
type block struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	HasChildren bool   `json:"has_children"`
	raw         map[string]json.RawMessage
}

// content is the union of the fields of the block types the tool renders.
type content struct {
	RichText   []richText   `json:"rich_text"`
	Checked    *bool        `json:"checked"`
	Language   string       `json:"language"`
	Title      string       `json:"title"`
	URL        string       `json:"url"`
	Expression string       `json:"expression"`
	Cells      [][]richText `json:"cells"`
	Caption    []richText   `json:"caption"`
	External   *struct {
		URL string `json:"url"`
	} `json:"external"`
	File *struct {
		URL string `json:"url"`
	} `json:"file"`
	Type       string `json:"type"`
	PageID     string `json:"page_id"`
	DatabaseID string `json:"database_id"`
}

func decodeBlock(b json.RawMessage) (block, error) {
	var bl block
	if err := json.Unmarshal(b, &bl); err != nil {
		return bl, fmt.Errorf("decode block: %w", err)
	}
	_ = json.Unmarshal(b, &bl.raw)
	return bl, nil
}

// childRef is a child page or database met while reading a page.
type childRef struct {
	Object string `json:"object"`
	ID     string `json:"id"`
	Title  string `json:"title"`
}

// render is one block as a line of text (without its children), and the
// child page or database it is, if any.
func (bl block) render() (string, *childRef) {
	var c content
	if raw, ok := bl.raw[bl.Type]; ok {
		_ = json.Unmarshal(raw, &c)
	}
	text := plain(c.RichText)
	switch bl.Type {
	case "heading_1":
		return "# " + text, nil
	case "heading_2":
		return "## " + text, nil
	case "heading_3":
		return "### " + text, nil
	case "bulleted_list_item", "toggle":
		return "- " + text, nil
	case "numbered_list_item":
		return "1. " + text, nil
	case "to_do":
		if c.Checked != nil && *c.Checked {
			return "[x] " + text, nil
		}
		return "[ ] " + text, nil
	case "quote":
		return "> " + text, nil
	case "callout":
		return "! " + text, nil
	case "code":
		return "```" + c.Language + "\n" + text + "\n```", nil
	case "equation":
		return "$$" + c.Expression + "$$", nil
	case "divider":
		return "---", nil
	case "child_page":
		return fmt.Sprintf("[page %q, id %s]", c.Title, bl.ID), &childRef{Object: "page", ID: bl.ID, Title: c.Title}
	case "child_database":
		return fmt.Sprintf("[database %q, id %s]", c.Title, bl.ID), &childRef{Object: "database", ID: bl.ID, Title: c.Title}
	case "link_to_page":
		if c.DatabaseID != "" {
			return "[link to database " + c.DatabaseID + "]", nil
		}
		return "[link to page " + c.PageID + "]", nil
	case "bookmark", "embed", "link_preview":
		return "[" + bl.Type + " " + c.URL + "] " + plain(c.Caption), nil
	case "image", "file", "pdf", "video", "audio":
		u := ""
		switch {
		case c.External != nil:
			u = c.External.URL
		case c.File != nil:
			u = c.File.URL
		}
		return strings.TrimSpace("[" + bl.Type + " " + u + "] " + plain(c.Caption)), nil
	case "table_row":
		cells := make([]string, len(c.Cells))
		for i, cell := range c.Cells {
			cells[i] = plain(cell)
		}
		return "| " + strings.Join(cells, " | ") + " |", nil
	case "table", "column_list", "column", "synced_block", "breadcrumb", "table_of_contents":
		return "", nil
	}
	if text != "" {
		return text, nil
	}
	return "[" + bl.Type + "]", nil
}

// pageTitle finds a page's title: the property of type title.
func pageTitle(props map[string]json.RawMessage) string {
	for _, raw := range props {
		var p struct {
			Type  string     `json:"type"`
			Title []richText `json:"title"`
		}
		if json.Unmarshal(raw, &p) == nil && p.Type == "title" {
			return plain(p.Title)
		}
	}
	return ""
}

// propertyValue reduces a page property to a plain JSON value a model can
// read: text as a string, a select as its name, a date as {start, end},
// people as names, relations as page ids. An unknown type stays as Notion
// sent it.
func propertyValue(raw json.RawMessage) any {
	var p struct {
		Type string `json:"type"`
	}
	var all map[string]json.RawMessage
	if json.Unmarshal(raw, &p) != nil || json.Unmarshal(raw, &all) != nil {
		return raw
	}
	v := all[p.Type]
	var out any
	switch p.Type {
	case "title", "rich_text":
		var rt []richText
		_ = json.Unmarshal(v, &rt)
		return plain(rt)
	case "select", "status":
		var s *struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(v, &s) == nil && s != nil {
			return s.Name
		}
		return nil
	case "multi_select", "people":
		var ss []struct {
			Name string `json:"name"`
			ID   string `json:"id"`
		}
		_ = json.Unmarshal(v, &ss)
		names := make([]string, 0, len(ss))
		for _, s := range ss {
			names = append(names, cmpOr(s.Name, s.ID))
		}
		return names
	case "relation":
		var rs []struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(v, &rs)
		ids := make([]string, 0, len(rs))
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		return ids
	case "formula":
		var f map[string]json.RawMessage
		var ft struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(v, &f) == nil && json.Unmarshal(v, &ft) == nil {
			_ = json.Unmarshal(f[ft.Type], &out)
			return out
		}
	}
	if json.Unmarshal(v, &out) == nil {
		return out
	}
	return raw
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
