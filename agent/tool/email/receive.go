package email

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/mailbox"
)

// AttachmentDir is where choir.email.receive saves attachments, relative to
// the workspace: AttachmentDir/<folder>/<uid>/<file name>.
const AttachmentDir = "mail"

var receiveParams = json.RawMessage(`{
  "type": "object",
  "properties": {
    "folder": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Folder to read; default INBOX."},
    "uid": {"type": "integer", "minimum": 1, "description": "Read just this message."},
    "unseen": {"type": "boolean", "description": "Only messages not yet read."},
    "since": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}", "description": "Only messages from this day on, YYYY-MM-DD."},
    "from": {"type": "string", "minLength": 1, "maxLength": 320, "description": "Only messages whose From contains this."},
    "subject": {"type": "string", "minLength": 1, "maxLength": 998, "description": "Only messages whose Subject contains this."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Messages per page, newest first; default 10."},
    "before_uid": {"type": "integer", "minimum": 1, "description": "Paging: only messages with a UID below this (next_before_uid of the previous page)."},
    "max_chars": {"type": "integer", "minimum": 100, "maximum": 100000, "description": "Body characters kept per message; default 8000."},
    "mark_seen": {"type": "boolean", "description": "Mark the messages read; default true."},
    "save_attachments": {"type": "boolean", "description": "Save attachments under mail/ in the workspace; default true."}
  },
  "additionalProperties": false
}`)

type receiveInput struct {
	Folder          string `json:"folder"`
	UID             uint32 `json:"uid"`
	Unseen          bool   `json:"unseen"`
	Since           string `json:"since"`
	From            string `json:"from"`
	Subject         string `json:"subject"`
	Limit           int    `json:"limit"`
	BeforeUID       uint32 `json:"before_uid"`
	MaxChars        int    `json:"max_chars"`
	MarkSeen        *bool  `json:"mark_seen"`
	SaveAttachments *bool  `json:"save_attachments"`
}

type receiveOutput struct {
	Account       string    `json:"account"`
	Folder        string    `json:"folder"`
	Matching      int       `json:"matching"`
	Messages      []message `json:"messages"`
	NextBeforeUID uint32    `json:"next_before_uid,omitempty"`
	// NotRead are the page's messages left unread because the call's
	// byte cap was reached; Note says so.
	NotRead []uint32 `json:"not_read,omitempty"`
	Note    string   `json:"note,omitempty"`
}

type receiver struct{ cfg Config }

// SideEffectOf says that receiving only reads, for the untrusted-input
// policy: what it writes is the attachments it brings in, under mail/.
func (receiver) SideEffectOf(json.RawMessage) tool.SideEffect { return tool.SideEffectRead }

func (r receiver) Spec() tool.Spec {
	return tool.Spec{
		LLM: tool.LLMView{Name: NameReceive, Parameters: receiveParams,
			Description: "Read email from your email account: messages of a folder (default INBOX) matching unseen, since, from " +
				"and subject, newest first, with the body as text. Attachments are saved under mail/<folder>/<uid>/ in the " +
				"workspace. Page with before_uid = next_before_uid."},
		Runtime: tool.Runtime{TimeoutMS: 120_000, Network: true, SideEffect: tool.SideEffectWrite, Version: "1.0",
			SecretResources: r.cfg.secrets(), Locks: []tool.LockTemplate{{Resource: "file:" + AttachmentDir, Mode: tool.ModeExclusive}}},
	}
}

func (r receiver) Execute(ctx context.Context, env tool.Env, input json.RawMessage) (tool.Result, error) {
	in, err := decode[receiveInput](input)
	if err != nil {
		return r.cfg.fail(ctx, NameReceive, Problem{Error: CodeBadInput, Message: err.Error()}), nil
	}
	in.Folder = cmp(in.Folder, "INBOX")
	if in.Limit == 0 {
		in.Limit = 10
	}
	if in.MaxChars == 0 {
		in.MaxChars = 8000
	}
	markSeen := in.MarkSeen == nil || *in.MarkSeen
	crit := imap.SearchCriteria{}
	if in.Unseen {
		crit.NotFlag = []imap.Flag{imap.FlagSeen}
	}
	if in.Since != "" {
		t, err := time.Parse(time.DateOnly, in.Since[:10])
		if err != nil {
			return r.cfg.fail(ctx, NameReceive, Problem{Error: CodeBadInput, Message: fmt.Sprintf("since %q: %v", in.Since, err),
				Fix: "write the day as YYYY-MM-DD"}), nil
		}
		crit.Since = t
	}
	if in.From != "" {
		crit.Header = append(crit.Header, imap.SearchCriteriaHeaderField{Key: "From", Value: in.From})
	}
	if in.Subject != "" {
		crit.Header = append(crit.Header, imap.SearchCriteriaHeaderField{Key: "Subject", Value: in.Subject})
	}
	if in.UID != 0 {
		crit.UID = []imap.UIDSet{imap.UIDSetNum(imap.UID(in.UID))}
	}

	name, acct, pw, p := r.cfg.session(env)
	if p != nil {
		return r.cfg.fail(ctx, NameReceive, *p), nil
	}
	c, err := mailbox.DialIMAP(ctx, r.cfg.mailboxAccount(acct), pw, nil)
	if err != nil {
		return r.cfg.failErr(ctx, NameReceive, err), nil
	}
	defer c.Close()
	if _, err := c.Select(in.Folder, &imap.SelectOptions{ReadOnly: !markSeen}).Wait(); err != nil {
		return r.cfg.fail(ctx, NameReceive, Problem{Error: CodeFolder, Message: fmt.Sprintf("folder %q: %v", in.Folder, err),
			Fix: "list the folders with choir.email.check"}), nil
	}
	data, err := c.UIDSearch(&crit, nil).Wait()
	if err != nil {
		return r.cfg.failErr(ctx, NameReceive, err), nil
	}
	uids := data.AllUIDs()
	slices.SortFunc(uids, func(a, b imap.UID) int { return int(int64(b) - int64(a)) })
	out := receiveOutput{Account: name, Folder: in.Folder, Matching: len(uids), Messages: []message{}}
	if in.BeforeUID != 0 {
		i, _ := slices.BinarySearchFunc(uids, imap.UID(in.BeforeUID), func(a, b imap.UID) int { return int(int64(b) - int64(a)) })
		if i < len(uids) && uids[i] == imap.UID(in.BeforeUID) {
			i++
		}
		uids = uids[i:]
	}
	page := uids[:min(in.Limit, len(uids))]
	if len(uids) > len(page) {
		out.NextBeforeUID = uint32(page[len(page)-1])
	}
	if len(page) == 0 {
		return tool.SuccessResult(fmt.Sprintf("no messages in %s match", in.Folder), out), nil
	}
	if prob, err := r.readPage(c, env.Workspace, in, acct, page, markSeen, &out); err != nil {
		return r.cfg.failErr(ctx, NameReceive, err), nil
	} else if prob != nil {
		return r.cfg.fail(ctx, NameReceive, *prob), nil
	}
	slices.SortFunc(out.Messages, func(a, b message) int { return int(int64(b.UID) - int64(a.UID)) })
	summary := fmt.Sprintf("%d of %d matching messages from %s", len(out.Messages), out.Matching, in.Folder)
	if len(out.NotRead) > 0 {
		summary += fmt.Sprintf("; %d not read (over this call's %d-byte cap)", len(out.NotRead), r.cfg.pageCap(acct))
		r.cfg.Logger.Info("email receive capped", slog.String("folder", in.Folder), slog.Any("not_read", out.NotRead))
	}
	return tool.SuccessResult(summary, out), nil
}

// DefaultMaxMessageBytes and DefaultMaxPageBytes bound what one
// choir.email.receive call reads of one message and of all its messages:
// it never holds more than that in memory, whatever the mailbox holds.
const (
	DefaultMaxMessageBytes = 16 << 20
	DefaultMaxPageBytes    = 48 << 20
)

// messageCap is the most read of one message: the configured cap, raised
// to hold an attachment of the account's limit (base64 adds a third).
func (c Config) messageCap(acct config.EmailAccount) int64 {
	n := c.MaxMessageBytes
	if n <= 0 {
		n = max(DefaultMaxMessageBytes, acct.AttachmentLimit()*4/3+1<<20)
	}
	return n
}

// pageCap is the most read of all the messages of one call.
func (c Config) pageCap(acct config.EmailAccount) int64 {
	n := c.MaxPageBytes
	if n <= 0 {
		n = DefaultMaxPageBytes
	}
	return max(n, c.messageCap(acct))
}

// readPage reads the page's messages, newest first, into out: each up to
// the per-message cap (a message over it says what was cut), and all of
// them up to the page's cap (the messages past it are listed in not_read,
// unread, and next_before_uid pages on to them).
func (r receiver) readPage(c *imapclient.Client, ws string, in receiveInput, acct config.EmailAccount, page []imap.UID,
	markSeen bool, out *receiveOutput) (*Problem, error) {
	sizes, err := fetchSizes(c, page)
	if err != nil {
		return nil, err
	}
	msgCap, left := r.cfg.messageCap(acct), r.cfg.pageCap(acct)
	var read []imap.UID
	for i, uid := range page {
		need := min(sizes[uid], msgCap)
		if need > left && i > 0 {
			for _, u := range page[i:] {
				out.NotRead = append(out.NotRead, uint32(u))
			}
			out.NextBeforeUID = uint32(page[i-1])
			out.Note = fmt.Sprintf("%d message(s) not read: one call reads at most %d bytes of mail (its cap); "+
				"read them with before_uid %d, or one at a time with uid", len(page)-i, r.cfg.pageCap(acct), page[i-1])
			break
		}
		left -= need
		read = append(read, uid)
	}
	save := in.SaveAttachments == nil || *in.SaveAttachments
	var prob *Problem
	err = fetchCapped(c, read, !markSeen, msgCap, func(b *imapclient.FetchMessageBuffer, cut bool) error {
		pm := parseMessage(b, in.MaxChars, cut)
		if cut {
			pm.Cut = fmt.Sprintf("the message is %d bytes; only its first %d were read (the per-message cap): "+
				"the text and attachments after that are missing", b.RFC822Size, msgCap)
		}
		if save && len(pm.parts) > 0 {
			if prob = saveAttachments(ws, in.Folder, &pm, acct.AttachmentLimit()); prob != nil {
				return errStop
			}
		}
		out.Messages = append(out.Messages, pm.message)
		return nil
	})
	if prob != nil {
		return prob, nil
	}
	return nil, err
}

// errStop ends a fetch early.
var errStop = errors.New("stop")

// fetchSizes returns the sizes of messages by UID.
func fetchSizes(c *imapclient.Client, uids []imap.UID) (map[imap.UID]int64, error) {
	bufs, err := c.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{UID: true, RFC822Size: true}).Collect()
	if err != nil {
		return nil, err
	}
	sizes := make(map[imap.UID]int64, len(bufs))
	for _, b := range bufs {
		sizes[b.UID] = b.RFC822Size
	}
	return sizes, nil
}

// fetchCapped fetches messages by UID, streaming each one's body and
// keeping at most msgCap bytes of it (asked of the server as a partial
// fetch, and enforced here against a server that ignores it: the rest is
// read and dropped), and hands each to fn with whether it was cut.
func fetchCapped(c *imapclient.Client, uids []imap.UID, peek bool, msgCap int64,
	fn func(b *imapclient.FetchMessageBuffer, cut bool) error) error {
	if len(uids) == 0 {
		return nil
	}
	body := &imap.FetchItemBodySection{Peek: peek, Partial: &imap.SectionPartial{Offset: 0, Size: msgCap}}
	cmd := c.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{UID: true, Flags: true, Envelope: true, RFC822Size: true,
		BodySection: []*imap.FetchItemBodySection{body}})
	defer cmd.Close()
	for msg := cmd.Next(); msg != nil; msg = cmd.Next() {
		buf := &imapclient.FetchMessageBuffer{SeqNum: msg.SeqNum}
		for item := msg.Next(); item != nil; item = msg.Next() {
			switch it := item.(type) {
			case imapclient.FetchItemDataBodySection:
				b, err := io.ReadAll(io.LimitReader(it.Literal, msgCap))
				if err != nil {
					return fmt.Errorf("read message: %w", err)
				}
				io.Copy(io.Discard, it.Literal) //nolint:errcheck // a server that ignored the partial fetch
				buf.BodySection = append(buf.BodySection, imapclient.FetchBodySectionBuffer{Section: it.Section, Bytes: b})
			case imapclient.FetchItemDataFlags:
				buf.Flags = it.Flags
			case imapclient.FetchItemDataEnvelope:
				buf.Envelope = it.Envelope
			case imapclient.FetchItemDataRFC822Size:
				buf.RFC822Size = it.Size
			case imapclient.FetchItemDataUID:
				buf.UID = it.UID
			}
		}
		if err := fn(buf, buf.RFC822Size > msgCap); err != nil {
			cmd.Close() //nolint:errcheck // the fetch is abandoned
			return err
		}
	}
	return cmd.Close()
}

func cmp(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}
