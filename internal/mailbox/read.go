package mailbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
)

// DefaultMaxMessageBytes and DefaultMaxPageBytes bound what one read of
// a folder (Fetch) holds of one message and of all its messages: never
// more than that in memory, whatever the mailbox holds.
const (
	DefaultMaxMessageBytes = 16 << 20
	DefaultMaxPageBytes    = 48 << 20
)

// CodeFolder is the code of an [*Error] about a folder that cannot be
// opened.
const CodeFolder = "folder_error"

// maxFolders bounds the folders Check counts.
const maxFolders = 100

// Query is what Fetch reads of a folder: the messages matching every set
// field, newest first, one page of them.
type Query struct {
	// Folder is the folder to read; empty is INBOX.
	Folder string `json:"folder,omitempty"`
	// UID reads just this message.
	UID    uint32 `json:"uid,omitempty"`
	Unseen bool   `json:"unseen,omitempty"`
	// Since is a day, YYYY-MM-DD.
	Since   string `json:"since,omitempty"`
	From    string `json:"from,omitempty"`
	Subject string `json:"subject,omitempty"`
	// Limit is the page's size; 0 is 10.
	Limit int `json:"limit,omitempty"`
	// BeforeUID pages on: only messages with a UID below it.
	BeforeUID uint32 `json:"before_uid,omitempty"`
	// MarkSeen marks the messages read.
	MarkSeen bool `json:"mark_seen,omitempty"`
	// MaxMessageBytes and MaxPageBytes bound what is read of one message
	// and of the page (0: the defaults).
	MaxMessageBytes int64 `json:"max_message_bytes,omitempty"`
	MaxPageBytes    int64 `json:"max_page_bytes,omitempty"`
}

// Header is what a message's envelope says, with its addresses written
// as "Name <addr>".
type Header struct {
	MessageID string    `json:"message_id,omitempty"`
	Date      time.Time `json:"date,omitzero"`
	From      string    `json:"from,omitempty"`
	To        []string  `json:"to,omitempty"`
	Cc        []string  `json:"cc,omitempty"`
	Subject   string    `json:"subject,omitempty"`
}

// Fetched is one message read: its place, its flags and its raw bytes,
// up to the per-message cap (Cut says it was cut there).
type Fetched struct {
	UID    uint32 `json:"uid"`
	Size   int64  `json:"size"`
	Seen   bool   `json:"seen"`
	Header Header `json:"header"`
	Raw    []byte `json:"raw,omitempty"`
	Cut    bool   `json:"cut,omitempty"`
}

// Page is the answer of Fetch.
type Page struct {
	Folder string `json:"folder"`
	// Matching counts the messages matching, on every page.
	Matching int       `json:"matching"`
	Messages []Fetched `json:"messages"`
	// NextBeforeUID is the BeforeUID of the next page; 0 on the last.
	NextBeforeUID uint32 `json:"next_before_uid,omitempty"`
	// NotRead are the page's messages left unread because the page's
	// byte cap was reached.
	NotRead []uint32 `json:"not_read,omitempty"`
	// MaxMessageBytes and MaxPageBytes are the caps the read applied.
	MaxMessageBytes int64 `json:"max_message_bytes"`
	MaxPageBytes    int64 `json:"max_page_bytes"`
}

// CheckQuery is what Check summarises: the newest messages of a folder.
type CheckQuery struct {
	// Folder is the folder whose newest messages are listed; empty is
	// INBOX.
	Folder string `json:"folder,omitempty"`
	// Newest is how many of them.
	Newest int `json:"newest"`
}

// FolderCount is a folder's message and unread counts.
type FolderCount struct {
	Name     string `json:"name"`
	Messages uint32 `json:"messages"`
	Unseen   uint32 `json:"unseen"`
}

// Brief is one message as Check lists it.
type Brief struct {
	UID    uint32 `json:"uid"`
	Size   int64  `json:"size"`
	Seen   bool   `json:"seen"`
	Header Header `json:"header"`
}

// Summary is the answer of Check.
type Summary struct {
	Folders []FolderCount `json:"folders"`
	Folder  string        `json:"folder"`
	// Newest are the folder's newest messages, newest first.
	Newest []Brief `json:"newest"`
}

// folderOr is folder, or INBOX when it is blank.
func folderOr(folder string) string {
	if strings.TrimSpace(folder) == "" {
		return "INBOX"
	}
	return folder
}

// Caps returns the per-message and per-page caps of q: the asked ones,
// or the defaults, the per-message cap raised to hold an attachment of
// attachmentLimit bytes (base64 adds a third), and neither above most
// when most is set (the host's own bound on what it reads for an agent).
func (q Query) Caps(attachmentLimit int64, most Query) (msgCap, pageCap int64) {
	msgCap = q.MaxMessageBytes
	if msgCap <= 0 {
		msgCap = max(DefaultMaxMessageBytes, attachmentLimit*4/3+1<<20)
	}
	pageCap = q.MaxPageBytes
	if pageCap <= 0 {
		pageCap = DefaultMaxPageBytes
	}
	if most.MaxMessageBytes > 0 {
		msgCap = min(msgCap, most.MaxMessageBytes)
	}
	if most.MaxPageBytes > 0 {
		pageCap = min(pageCap, most.MaxPageBytes)
	}
	return msgCap, max(pageCap, msgCap)
}

// criteria is the IMAP search of q.
func (q Query) criteria() (imap.SearchCriteria, error) {
	crit := imap.SearchCriteria{}
	if q.Unseen {
		crit.NotFlag = []imap.Flag{imap.FlagSeen}
	}
	if q.Since != "" {
		if len(q.Since) < 10 {
			return crit, fmt.Errorf("since %q: want YYYY-MM-DD", q.Since)
		}
		t, err := time.Parse(time.DateOnly, q.Since[:10])
		if err != nil {
			return crit, fmt.Errorf("since %q: %w", q.Since, err)
		}
		crit.Since = t
	}
	if q.From != "" {
		crit.Header = append(crit.Header, imap.SearchCriteriaHeaderField{Key: "From", Value: q.From})
	}
	if q.Subject != "" {
		crit.Header = append(crit.Header, imap.SearchCriteriaHeaderField{Key: "Subject", Value: q.Subject})
	}
	if q.UID != 0 {
		crit.UID = []imap.UIDSet{imap.UIDSetNum(imap.UID(q.UID))}
	}
	return crit, nil
}

// ErrQuery is a query that cannot be asked (a malformed day).
var ErrQuery = errors.New("bad query")

// Fetch logs in and reads one page of q's messages, newest first: each
// up to the per-message cap (Fetched.Cut says what was cut), and all of
// them up to the page's cap (the messages past it are listed in NotRead,
// unread, and NextBeforeUID pages on to them). The caps are already
// resolved (Query.Caps).
func Fetch(ctx context.Context, acct Account, password string, q Query) (Page, error) {
	crit, err := q.criteria()
	if err != nil {
		return Page{}, fmt.Errorf("%w: %w", ErrQuery, err)
	}
	q.Folder = folderOr(q.Folder)
	if q.MaxMessageBytes <= 0 || q.MaxPageBytes <= 0 {
		q.MaxMessageBytes, q.MaxPageBytes = q.Caps(0, Query{})
	}
	if q.Limit <= 0 {
		q.Limit = 10
	}
	c, err := DialIMAP(ctx, acct, password, nil)
	if err != nil {
		return Page{}, err
	}
	defer c.Close()
	if _, err := c.Select(q.Folder, &imap.SelectOptions{ReadOnly: !q.MarkSeen}).Wait(); err != nil {
		return Page{}, folderError(q.Folder, err, "list the folders with choir.email.check")
	}
	data, err := c.UIDSearch(&crit, nil).Wait()
	if err != nil {
		return Page{}, imapError(acct, err)
	}
	newestFirst := func(a, b imap.UID) int { return int(int64(b) - int64(a)) }
	uids := data.AllUIDs()
	slices.SortFunc(uids, newestFirst)
	out := Page{Folder: q.Folder, Matching: len(uids), Messages: []Fetched{}, MaxMessageBytes: q.MaxMessageBytes,
		MaxPageBytes: q.MaxPageBytes}
	if q.BeforeUID != 0 {
		i, found := slices.BinarySearchFunc(uids, imap.UID(q.BeforeUID), newestFirst)
		if found {
			i++
		}
		uids = uids[i:]
	}
	page := uids[:min(q.Limit, len(uids))]
	if len(uids) > len(page) {
		out.NextBeforeUID = uint32(page[len(page)-1])
	}
	if len(page) == 0 {
		return out, nil
	}
	sizes, err := fetchSizes(c, page)
	if err != nil {
		return Page{}, imapError(acct, err)
	}
	left := q.MaxPageBytes
	var read []imap.UID
	for i, uid := range page {
		need := min(sizes[uid], q.MaxMessageBytes)
		if need > left && i > 0 {
			for _, u := range page[i:] {
				out.NotRead = append(out.NotRead, uint32(u))
			}
			out.NextBeforeUID = uint32(page[i-1])
			break
		}
		left -= need
		read = append(read, uid)
	}
	err = fetchCapped(c, read, !q.MarkSeen, q.MaxMessageBytes, func(f Fetched) { out.Messages = append(out.Messages, f) })
	if err != nil {
		return Page{}, imapError(acct, err)
	}
	slices.SortFunc(out.Messages, func(a, b Fetched) int { return int(int64(b.UID) - int64(a.UID)) })
	return out, nil
}

// Check logs in and counts the messages of each folder, and lists the
// newest messages of q's folder.
func Check(ctx context.Context, acct Account, password string, q CheckQuery) (Summary, error) {
	c, err := DialIMAP(ctx, acct, password, nil)
	if err != nil {
		return Summary{}, err
	}
	defer c.Close()
	out := Summary{Folder: folderOr(q.Folder), Folders: []FolderCount{}, Newest: []Brief{}}
	list, err := c.List("", "*", nil).Collect()
	if err != nil {
		return Summary{}, imapError(acct, err)
	}
	for _, l := range list {
		if len(out.Folders) == maxFolders {
			break
		}
		if slices.Contains(l.Attrs, imap.MailboxAttrNoSelect) || slices.Contains(l.Attrs, imap.MailboxAttrNonExistent) {
			continue
		}
		st, err := c.Status(l.Mailbox, &imap.StatusOptions{NumMessages: true, NumUnseen: true}).Wait()
		if err != nil {
			continue // a folder the server will not count is left out
		}
		fc := FolderCount{Name: l.Mailbox}
		if st.NumMessages != nil {
			fc.Messages = *st.NumMessages
		}
		if st.NumUnseen != nil {
			fc.Unseen = *st.NumUnseen
		}
		out.Folders = append(out.Folders, fc)
	}
	if q.Newest <= 0 {
		return out, nil
	}
	sel, err := c.Select(out.Folder, &imap.SelectOptions{ReadOnly: true}).Wait()
	if err != nil {
		return Summary{}, folderError(out.Folder, err, "use one of the folders listed in folders")
	}
	if n := sel.NumMessages; n > 0 {
		first := uint32(max(1, int64(n)-int64(q.Newest)+1))
		var seq imap.SeqSet
		seq.AddRange(first, n)
		msgs, err := c.Fetch(seq, &imap.FetchOptions{UID: true, Flags: true, Envelope: true, RFC822Size: true}).Collect()
		if err != nil {
			return Summary{}, imapError(acct, err)
		}
		for _, b := range msgs {
			out.Newest = append(out.Newest, Brief{UID: uint32(b.UID), Size: b.RFC822Size,
				Seen: slices.Contains(b.Flags, imap.FlagSeen), Header: headerOf(b.Envelope)})
		}
		slices.SortFunc(out.Newest, func(a, b Brief) int { return int(int64(b.UID) - int64(a.UID)) })
	}
	return out, nil
}

// folderError is a folder that could not be opened.
func folderError(folder string, err error, hint string) *Error {
	return &Error{Code: CodeFolder, Server: "imap folder " + folder, Hint: hint, Err: err}
}

// imapError is a failure of the IMAP server once logged in.
func imapError(acct Account, err error) error {
	var me *Error
	if errors.As(err, &me) {
		return err
	}
	return &Error{Code: CodeServer, Server: "imap " + addr(acct.IMAPHost, acct.IMAPPort), Err: err,
		Hint: "the server failed the command; try again later"}
}

// headerOf is what an IMAP envelope says.
func headerOf(env *imap.Envelope) Header {
	if env == nil {
		return Header{}
	}
	h := Header{Subject: env.Subject, MessageID: env.MessageID}
	if !env.Date.IsZero() {
		h.Date = env.Date.UTC()
	}
	if len(env.From) > 0 {
		h.From = addrString(env.From[0])
	}
	for _, a := range env.To {
		h.To = append(h.To, addrString(a))
	}
	for _, a := range env.Cc {
		h.Cc = append(h.Cc, addrString(a))
	}
	return h
}

func addrString(a imap.Address) string {
	if a.Name != "" {
		return fmt.Sprintf("%s <%s>", a.Name, a.Addr())
	}
	return a.Addr()
}

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
// read and dropped), and hands each to fn.
func fetchCapped(c *imapclient.Client, uids []imap.UID, peek bool, msgCap int64, fn func(Fetched)) error {
	if len(uids) == 0 {
		return nil
	}
	body := &imap.FetchItemBodySection{Peek: peek, Partial: &imap.SectionPartial{Offset: 0, Size: msgCap}}
	cmd := c.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{UID: true, Flags: true, Envelope: true, RFC822Size: true,
		BodySection: []*imap.FetchItemBodySection{body}})
	defer cmd.Close()
	for msg := cmd.Next(); msg != nil; msg = cmd.Next() {
		var f Fetched
		for item := msg.Next(); item != nil; item = msg.Next() {
			switch it := item.(type) {
			case imapclient.FetchItemDataBodySection:
				b, err := io.ReadAll(io.LimitReader(it.Literal, msgCap))
				if err != nil {
					return fmt.Errorf("read message: %w", err)
				}
				io.Copy(io.Discard, it.Literal) //nolint:errcheck // a server that ignored the partial fetch
				f.Raw = b
			case imapclient.FetchItemDataFlags:
				f.Seen = slices.Contains(it.Flags, imap.FlagSeen)
			case imapclient.FetchItemDataEnvelope:
				f.Header = headerOf(it.Envelope)
			case imapclient.FetchItemDataRFC822Size:
				f.Size = it.Size
			case imapclient.FetchItemDataUID:
				f.UID = uint32(it.UID)
			}
		}
		f.Cut = f.Size > msgCap
		fn(f)
	}
	return cmd.Close()
}
