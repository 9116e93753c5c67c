package mailbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/emersion/go-imap/v2"
)

// sentNames are the names providers give the folder of sent mail, for a
// server that does not mark it \Sent (RFC 6154).
var sentNames = []string{"Sent", "Sent Items", "Sent Messages", "Sent Mail", "[Gmail]/Sent Mail", "INBOX.Sent"}

// ErrNoSentFolder is returned by InSent when the account has no folder of
// sent mail to look in.
var ErrNoSentFolder = errors.New("no Sent folder on the server")

// InSent reports whether the account's folder of sent mail holds a
// message with the Message-ID messageID (without its angle brackets): how
// a mail sent before a crash is found again, since SMTP itself remembers
// nothing. The folder is the one marked \Sent, or one of the usual names.
func InSent(ctx context.Context, acct Account, password, messageID string) (bool, error) {
	if acct.IMAPHost == "" {
		return false, fmt.Errorf("%w: the account has no IMAP server to look in", ErrNoSentFolder)
	}
	c, err := DialIMAP(ctx, acct, password, nil)
	if err != nil {
		return false, err
	}
	defer c.Close()
	boxes, err := c.List("", "*", nil).Collect()
	if err != nil {
		return false, fmt.Errorf("list folders: %w", err)
	}
	folder := ""
	for _, b := range boxes {
		if slices.Contains(b.Attrs, imap.MailboxAttrSent) {
			folder = b.Mailbox
			break
		}
	}
	for _, name := range sentNames {
		for _, b := range boxes {
			if folder == "" && strings.EqualFold(b.Mailbox, name) {
				folder = b.Mailbox
			}
		}
	}
	if folder == "" {
		return false, ErrNoSentFolder
	}
	if _, err := c.Select(folder, &imap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
		return false, fmt.Errorf("open %s: %w", folder, err)
	}
	crit := imap.SearchCriteria{Header: []imap.SearchCriteriaHeaderField{{Key: "Message-ID", Value: messageID}}}
	data, err := c.UIDSearch(&crit, nil).Wait()
	if err != nil {
		return false, fmt.Errorf("search %s: %w", folder, err)
	}
	return len(data.AllUIDs()) > 0, nil
}
