// Package readable turns an HTML page into the text a model should read:
// the main content (the largest <main> or <article>, else the body) with
// scripts, styles, navigation, headers, footers, asides and forms'
// hidden parts dropped, block elements on their own lines, and whitespace
// collapsed. choir.web.fetch and the browser worker's text mode share it,
// so a page reads the same whichever tool fetched it. Links lists a page's
// links with their anchor text.
package readable

import (
	"io"
	"net/url"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Page is the readable form of an HTML document.
type Page struct {
	Title string `json:"title,omitempty"`
	Text  string `json:"text"`
}

// Link is one hyperlink of a page.
type Link struct {
	Text string `json:"text"`
	URL  string `json:"url"`
}

// skip are elements whose content is never text a reader sees, or is
// boilerplate around the main content.
var skip = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true, atom.Svg: true,
	atom.Iframe: true, atom.Nav: true, atom.Header: true, atom.Footer: true, atom.Aside: true,
	atom.Button: true, atom.Select: true, atom.Head: true, atom.Canvas: true, atom.Object: true,
}

// block are elements that start a new line.
var block = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Br: true, atom.Li: true, atom.Tr: true, atom.H1: true, atom.H2: true,
	atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true, atom.Section: true, atom.Article: true,
	atom.Main: true, atom.Pre: true, atom.Blockquote: true, atom.Ul: true, atom.Ol: true, atom.Table: true,
	atom.Dd: true, atom.Dt: true, atom.Hr: true, atom.Figcaption: true, atom.Form: true, atom.Label: true,
}

// Extract parses an HTML document and returns its readable text.
func Extract(r io.Reader) (Page, error) {
	doc, err := html.Parse(r)
	if err != nil {
		return Page{}, err
	}
	var p Page
	if t := find(doc, func(n *html.Node) bool { return n.DataAtom == atom.Title }); t != nil {
		p.Title = collapse(textOf(t))
	}
	root := mainContent(doc)
	var b strings.Builder
	render(&b, root)
	p.Text = tidy(b.String())
	return p, nil
}

// mainContent picks the element holding the page's main content: the
// <main>, [role=main] or <article> with the most text, else <body>.
func mainContent(doc *html.Node) *html.Node {
	var best *html.Node
	bestLen := 0
	walk(doc, func(n *html.Node) bool {
		if n.Type != html.ElementNode || skip[n.DataAtom] {
			return n.Type != html.ElementNode || !skip[n.DataAtom]
		}
		if n.DataAtom == atom.Main || n.DataAtom == atom.Article || attr(n, "role") == "main" {
			var b strings.Builder
			render(&b, n)
			if l := len(strings.TrimSpace(b.String())); l > bestLen {
				best, bestLen = n, l
			}
		}
		return true
	})
	if best != nil && bestLen > 0 {
		return best
	}
	if body := find(doc, func(n *html.Node) bool { return n.DataAtom == atom.Body }); body != nil {
		return body
	}
	return doc
}

// render writes the visible text below n.
func render(b *strings.Builder, n *html.Node) {
	switch n.Type {
	case html.TextNode:
		b.WriteString(n.Data)
		return
	case html.ElementNode:
		if skip[n.DataAtom] || attr(n, "hidden") != "" || attr(n, "aria-hidden") == "true" {
			return
		}
		if n.DataAtom == atom.Input && attr(n, "type") != "hidden" {
			if v := attr(n, "value"); v != "" {
				b.WriteString(" " + v + " ")
			}
			return
		}
		if n.DataAtom == atom.Img {
			if alt := attr(n, "alt"); alt != "" {
				b.WriteString(" [" + alt + "] ")
			}
			return
		}
	}
	isBlock := n.Type == html.ElementNode && block[n.DataAtom]
	if isBlock {
		b.WriteString("\n")
		if n.DataAtom == atom.Li {
			b.WriteString("- ")
		}
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		render(b, c)
	}
	if isBlock {
		b.WriteString("\n")
	} else if n.Type == html.ElementNode && (n.DataAtom == atom.Td || n.DataAtom == atom.Th) {
		b.WriteString("\t")
	}
}

// tidy collapses runs of spaces within lines and drops empty lines beyond
// one.
func tidy(s string) string {
	lines := strings.Split(s, "\n")
	out := make([]string, 0, len(lines))
	blank := true
	for _, l := range lines {
		l = collapse(l)
		if l == "" {
			if !blank {
				out = append(out, "")
			}
			blank = true
			continue
		}
		out = append(out, l)
		blank = false
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

func collapse(s string) string { return strings.Join(strings.Fields(s), " ") }

// Links returns the page's links with their anchor text, resolved against
// base (which may be nil), without duplicates and without javascript:
// or fragment-only targets.
func Links(r io.Reader, base *url.URL) ([]Link, error) {
	doc, err := html.Parse(r)
	if err != nil {
		return nil, err
	}
	var links []Link
	seen := map[string]bool{}
	walk(doc, func(n *html.Node) bool {
		if n.Type != html.ElementNode || n.DataAtom != atom.A {
			return true
		}
		href := strings.TrimSpace(attr(n, "href"))
		if href == "" || strings.HasPrefix(href, "#") || strings.HasPrefix(strings.ToLower(href), "javascript:") {
			return false
		}
		u, err := url.Parse(href)
		if err != nil {
			return false
		}
		if base != nil {
			u = base.ResolveReference(u)
		}
		text := collapse(textOf(n))
		if text == "" {
			text = attr(n, "title")
		}
		if key := u.String() + "\x00" + text; !seen[key] {
			seen[key] = true
			links = append(links, Link{Text: text, URL: u.String()})
		}
		return false
	})
	return links, nil
}

// textOf returns all text below n.
func textOf(n *html.Node) string {
	var b strings.Builder
	walk(n, func(c *html.Node) bool {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
		return true
	})
	return b.String()
}

// walk visits n and its descendants depth-first; fn returning false
// skips a node's children.
func walk(n *html.Node, fn func(*html.Node) bool) {
	if !fn(n) {
		return
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, fn)
	}
}

// find returns the first node below n for which fn is true.
func find(n *html.Node, fn func(*html.Node) bool) *html.Node {
	var found *html.Node
	walk(n, func(c *html.Node) bool {
		if found != nil {
			return false
		}
		if fn(c) {
			found = c
			return false
		}
		return true
	})
	return found
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}
