package email

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	_ "github.com/emersion/go-message/charset" // decode the charsets mail uses besides UTF-8
	gmail "github.com/emersion/go-message/mail"
	"golang.org/x/net/html"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/internal/mailbox"
)

// message is one message as the model sees it.
type message struct {
	UID           uint32   `json:"uid"`
	MessageID     string   `json:"message_id,omitempty"`
	Date          string   `json:"date,omitempty"`
	From          string   `json:"from,omitempty"`
	To            []string `json:"to,omitempty"`
	Cc            []string `json:"cc,omitempty"`
	Subject       string   `json:"subject"`
	Seen          bool     `json:"seen"`
	Size          int64    `json:"size,omitempty"`
	Text          string   `json:"text,omitempty"`
	TextTruncated bool     `json:"text_truncated,omitempty"`
	// Cut says that the message was over the per-message cap and what of
	// it was not read.
	Cut         string          `json:"cut,omitempty"`
	Attachments []attachmentOut `json:"attachments,omitempty"`
	ParseError  string          `json:"parse_error,omitempty"`
}

type attachmentOut struct {
	Name string `json:"name"`
	MIME string `json:"mime,omitempty"`
	Size int    `json:"size"`
	// Path is where it was saved in the workspace.
	Path string `json:"path,omitempty"`
	// Skipped says why it was not saved.
	Skipped string `json:"skipped,omitempty"`
}

type parsed struct {
	message
	parts [][]byte // attachment contents, by index of Attachments
}

// incomplete marks attachment i as cut short, and drops what was read.
func (p *parsed) incomplete(i int) {
	p.Attachments[i].Skipped = "incomplete: the message was cut before its end, so this attachment was not saved"
	p.parts[i] = nil
}

// envelope fills the header fields of m from what the envelope said.
func envelope(m *message, h mailbox.Header) {
	m.Subject, m.MessageID, m.From, m.To, m.Cc = h.Subject, h.MessageID, h.From, h.To, h.Cc
	if !h.Date.IsZero() {
		m.Date = h.Date.UTC().Format(time.RFC3339)
	}
}

// parseMessage reads a fetched message: its envelope, its text (an HTML
// body is reduced to text when there is no plain one) and its attachments.
// A message cut short (cut) has its last attachment, and any whose part
// did not read whole, marked incomplete and not kept.
func parseMessage(f mailbox.Fetched, maxChars int) parsed {
	p := parsed{message: message{UID: f.UID, Size: f.Size, Seen: f.Seen}}
	envelope(&p.message, f.Header)
	cut := f.Cut
	r, err := gmail.CreateReader(bytes.NewReader(f.Raw))
	if err != nil {
		p.ParseError = err.Error()
		return p
	}
	var plain, htm strings.Builder
	for {
		part, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			p.ParseError = err.Error()
			break
		}
		data, readErr := io.ReadAll(part.Body)
		switch h := part.Header.(type) {
		case *gmail.InlineHeader:
			ct, _, _ := h.ContentType()
			switch ct {
			case "text/plain", "":
				plain.Write(data)
			case "text/html":
				htm.Write(data)
			}
		case *gmail.AttachmentHeader:
			name, _ := h.Filename()
			ct, _, _ := h.ContentType()
			p.Attachments = append(p.Attachments, attachmentOut{Name: name, MIME: ct, Size: len(data)})
			p.parts = append(p.parts, data)
			if readErr != nil {
				p.incomplete(len(p.parts) - 1)
			}
		}
	}
	if cut && len(p.parts) > 0 {
		p.incomplete(len(p.parts) - 1)
	}
	text := plain.String()
	if strings.TrimSpace(text) == "" && htm.Len() > 0 {
		text = htmlText(htm.String())
	}
	text = strings.ReplaceAll(text, "\r\n", "\n")
	p.Text, p.TextTruncated = truncate(strings.TrimSpace(text), maxChars)
	return p
}

func truncate(s string, n int) (string, bool) {
	if utf8.RuneCountInString(s) <= n {
		return s, false
	}
	r := []rune(s)
	return string(r[:n]), true
}

// htmlText is the visible text of an HTML body, one block per line.
func htmlText(s string) string {
	z := html.NewTokenizer(strings.NewReader(s))
	var b strings.Builder
	skip := 0
	for {
		switch z.Next() {
		case html.ErrorToken:
			var lines []string
			for _, l := range strings.Split(b.String(), "\n") {
				if l = strings.Join(strings.Fields(l), " "); l != "" {
					lines = append(lines, l)
				}
			}
			return strings.Join(lines, "\n")
		case html.StartTagToken, html.EndTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style":
				if z.Token().Type == html.StartTagToken {
					skip++
				} else if skip > 0 {
					skip--
				}
			case "br", "p", "div", "li", "tr", "h1", "h2", "h3":
				b.WriteString("\n")
			}
		case html.TextToken:
			if skip == 0 {
				b.Write(z.Text())
			}
		}
	}
}

// saveAttachments writes a message's attachments under
// AttachmentDir/<folder>/<uid>/ in the workspace and records their paths;
// one over limit bytes is skipped.
func saveAttachments(ws, folder string, p *parsed, limit int64) *Problem {
	root, err := os.OpenRoot(ws)
	if err != nil {
		return &Problem{Error: CodeAttachmentUnusable, Message: "open the workspace: " + tool.ErrText(err)}
	}
	defer root.Close()
	dir := path.Join(AttachmentDir, safeName(folder, "folder"), fmt.Sprint(p.UID))
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return &Problem{Error: CodeAttachmentUnusable, Message: "create " + dir + ": " + tool.ErrText(err)}
	}
	used := map[string]bool{}
	for i := range p.Attachments {
		if p.Attachments[i].Skipped != "" {
			continue
		}
		if int64(len(p.parts[i])) > limit {
			p.Attachments[i].Skipped = fmt.Sprintf("%d bytes, over the account's limit of %d", len(p.parts[i]), limit)
			continue
		}
		name := safeName(p.Attachments[i].Name, fmt.Sprintf("attachment-%d", i+1))
		for used[name] {
			name = fmt.Sprintf("%d-%s", i+1, name)
		}
		used[name] = true
		rel := path.Join(dir, name)
		if err := tool.WriteFileAtomic(root, rel, p.parts[i], 0o644); err != nil {
			return &Problem{Error: CodeAttachmentUnusable, Message: "save " + rel + ": " + tool.ErrText(err)}
		}
		p.Attachments[i].Path = rel
	}
	return nil
}

// safeName makes a file name of a name from a message: no directories, no
// hidden or empty names.
func safeName(s, def string) string {
	s = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 || r < 0x20 {
			return '_'
		}
		return r
	}, s)
	s = strings.TrimLeft(strings.TrimSpace(s), ".")
	if s == "" {
		return def
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
