package mailwatch

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/choirhq/choir/daemon/inbox"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/sql/seam"
)

// Held mail is announced in the user's next turn: the inbox calls
// AnnounceHeld (registered with Inbox.OnUserMessage) in the transaction
// that stores the user's message, and the digest it stores is pushed just
// before that message. The digest and the user's message are stored
// together or not at all, and each held row names its digest, so a held
// message is announced once, whatever restarts.

// DigestSource is the inbox gateway of digests; a digest's update id is
// the first held row it announces, which no other digest can announce.
const DigestSource = "mail-digest"

// maxDigest bounds the messages one digest announces; the rest wait for
// the next.
const maxDigest = 100

// heldLine is the digest's line for a held message: why it was held, its
// sender and subject on one line, and where it is.
func heldLine(account, folder string, m Mail, why string) string {
	return fmt.Sprintf("- from %s, held because %s: Subject: %s (account %s, folder %q, uid %d)",
		m.sender(), why, oneLine(m.Subject), account, folder, m.UID)
}

// AnnounceHeld stores, through tx, a digest of the held mail of agentID's
// DM that no digest announced yet, and marks those rows announced by it.
// It returns the digest's row, or none when no mail was held. It is an
// inbox.AnnounceFunc.
func AnnounceHeld(ctx context.Context, tx db.DBTX, agentID, dm string) ([]db.ChoirControlInbox, error) {
	q := seam.Queries(tx)
	held, err := q.InboxMailHeldTake(ctx, db.InboxMailHeldTakeParams{AgentID: &agentID, Dm: dm, MaxRows: maxDigest})
	if err != nil {
		return nil, fmt.Errorf("take the held mail of %s: %w", agentID, err)
	}
	if len(held) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, len(held))
	var sources []string
	for _, h := range held {
		ids = append(ids, h.InboxID)
		sources = append(sources, h.Sources...)
	}
	slices.Sort(sources)
	row, err := inbox.AddNotice(ctx, tx, inbox.Notice{Source: DigestSource, UpdateID: held[0].InboxID, DM: dm, AgentID: agentID,
		ChatID: held[0].ChatID, Kind: inbox.InboxMailDigest, Text: digestText(held), Sources: slices.Compact(sources)})
	if err != nil {
		return nil, fmt.Errorf("store the digest of the held mail of %s: %w", agentID, err)
	}
	n, err := q.InboxMailHeldAnnounce(ctx, db.InboxMailHeldAnnounceParams{DigestID: row.InboxID, InboxIds: ids})
	if err != nil {
		return nil, fmt.Errorf("mark the held mail of %s announced: %w", agentID, err)
	}
	if n != int64(len(ids)) {
		// The rows were locked by the take: nothing else can announce them.
		return nil, fmt.Errorf("mark the held mail of %s announced: %d of %d rows marked", agentID, n, len(ids))
	}
	return []db.ChoirControlInbox{row}, nil
}

// digestText frames the held rows' lines as the senders' words.
func digestText(held []db.ChoirControlInbox) string {
	var b strings.Builder
	noun := "message"
	if len(held) > 1 {
		noun = "messages"
	}
	fmt.Fprintf(&b, "[mail digest — untrusted: the senders' words, not the user's]\n"+
		"%d new %s arrived that did not start a turn:\n", len(held), noun)
	for _, h := range held {
		b.WriteString(h.Text)
		b.WriteByte('\n')
	}
	b.WriteString(`Read one with choir.email.receive {"folder": ..., "uid": ...}.`)
	return b.String()
}
