package mailbox

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// Statuses of a [Sent].
const (
	StatusSent        = "sent"
	StatusAlreadySent = "already_sent"
)

// CodeInDoubt is the code of an [*Error] saying that a mail may or may
// not have gone out before a crash, and was not sent again.
const CodeInDoubt = "send_in_doubt"

// Submission is one mail to submit over SMTP, already written.
type Submission struct {
	// MessageID is the mail's Message-ID, without its angle brackets: a
	// mail is sent once under it.
	MessageID string `json:"message_id"`
	// From is the envelope sender; Recipients the envelope recipients
	// (To, Cc and Bcc: Bcc is in no header).
	From       string   `json:"from"`
	Recipients []string `json:"recipients"`
	// Raw is the message as it goes out (RFC 5322).
	Raw []byte `json:"raw"`
	// ApprovalID is the approval a person granted for this very mail,
	// for an account that needs one.
	ApprovalID string `json:"approval_id,omitempty"`
	// CheckSent first looks for MessageID in the Sent folder and sends
	// nothing if it is there: a call run again after a restart. Sent
	// from the agent to choird it is left out: choird keeps its own
	// record of what it sent.
	CheckSent bool `json:"-"`
}

// Sent is the outcome of a submission.
type Sent struct {
	// Status is StatusSent, or StatusAlreadySent when the mail had gone
	// out before and nothing was sent again.
	Status    string `json:"status"`
	MessageID string `json:"message_id"`
}

// Submit sends sub from the account: when sub.CheckSent, only if its
// Message-ID is not in the Sent folder already (a folder that cannot be
// searched is an error of code CodeInDoubt, and nothing is sent).
func Submit(ctx context.Context, acct Account, password string, sub Submission) (Sent, error) {
	if sub.CheckSent {
		found, err := InSent(ctx, acct, password, sub.MessageID)
		switch {
		case err != nil:
			return Sent{}, &Error{Code: CodeInDoubt, Server: "imap " + addr(acct.IMAPHost, acct.IMAPPort), Err: err,
				Hint: "this mail may have been sent before a restart and the Sent folder could not be searched; " +
					"it was not sent again: ask the user whether it arrived"}
		case found:
			return Sent{Status: StatusAlreadySent, MessageID: "<" + sub.MessageID + ">"}, nil
		}
	}
	if err := SendRaw(ctx, acct, password, sub.From, sub.Recipients, sub.Raw); err != nil {
		return Sent{}, err
	}
	return Sent{Status: StatusSent, MessageID: "<" + sub.MessageID + ">"}, nil
}

// SendRaw dials the account's SMTP server, logs in and submits raw from
// from to the recipients.
func SendRaw(ctx context.Context, acct Account, password, from string, recipients []string, raw []byte) error {
	server := "smtp " + addr(acct.SMTPHost, acct.SMTPPort)
	c, err := SMTPClient(acct, password)
	if err != nil {
		return &Error{Code: CodeServer, Server: server, Err: err, Hint: "check the account's smtp_host and smtp_port"}
	}
	sc, err := c.DialToSMTPClientWithContext(ctx)
	if err != nil {
		var ne net.Error
		var oe *net.OpError
		if errors.As(err, &oe) || errors.As(err, &ne) || ctx.Err() != nil {
			return unreachable(server, err)
		}
		return &Error{Code: CodeAuth, Server: server, Err: err,
			Hint: "the server refused the connection or the login; check the username in config.json and the password in the account's secret, then choirctl secret apply"}
	}
	defer func() { _ = c.CloseWithSMTPClient(sc) }()
	refused := func(err error) error {
		return &Error{Code: CodeServer, Server: server, Err: err, Hint: "the server did not accept the message; read its answer above"}
	}
	if err := sc.Mail(from); err != nil {
		return refused(fmt.Errorf("MAIL FROM %s: %w", from, err))
	}
	for _, to := range recipients {
		if err := sc.Rcpt(to); err != nil {
			return refused(fmt.Errorf("RCPT TO %s: %w", to, err))
		}
	}
	w, err := sc.Data()
	if err != nil {
		return refused(fmt.Errorf("DATA: %w", err))
	}
	if _, err := w.Write(raw); err != nil {
		w.Close()
		return refused(fmt.Errorf("DATA: %w", err))
	}
	if err := w.Close(); err != nil {
		return refused(fmt.Errorf("DATA: %w", err))
	}
	return nil
}

// Direct reaches an account's servers itself, with the password: choird
// does, and the agent when it has no egress gateway.
type Direct struct {
	Account  Account
	Password string
}

// Send submits sub (Submit).
func (d Direct) Send(ctx context.Context, sub Submission) (Sent, error) {
	return Submit(ctx, d.Account, d.Password, sub)
}

// Fetch reads a page of a folder (Fetch).
func (d Direct) Fetch(ctx context.Context, q Query) (Page, error) {
	return Fetch(ctx, d.Account, d.Password, q)
}

// Check summarises the folders (Check).
func (d Direct) Check(ctx context.Context, q CheckQuery) (Summary, error) {
	return Check(ctx, d.Account, d.Password, q)
}

// MaxSubmitBytes bounds a mail submitted through choird's route, as
// written (attachments in base64): what providers commonly accept.
const MaxSubmitBytes = 48 << 20

// ApprovalType is the request type of the approval an account that needs
// one files for each mail: the name of the tool that sends it.
const ApprovalType = "choir.email.send"

// ApprovalPayload is what a person approves of a mail, as the tool files
// it: choird sends under the approval only a mail that is exactly this.
type ApprovalPayload struct {
	Account     string   `json:"account"`
	From        string   `json:"from"`
	To          []string `json:"to"`
	Cc          []string `json:"cc"`
	Bcc         []string `json:"bcc"`
	Subject     string   `json:"subject"`
	Text        string   `json:"text"`
	HTML        string   `json:"html"`
	InReplyTo   string   `json:"in_reply_to"`
	Attachments []struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	} `json:"attachments"`
}
