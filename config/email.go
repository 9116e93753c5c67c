package config

import (
	"net/mail"
	"strings"

	"github.com/choirhq/choir/strictjson"
)

// EmailTLS says how an email account's connections are secured.
type EmailTLS string

// The TLS modes of an email account.
const (
	// EmailTLSAuto uses implicit TLS on ports 465 (SMTP) and 993 (IMAP)
	// and requires STARTTLS on any other port.
	EmailTLSAuto EmailTLS = ""
	// EmailTLSNone speaks plain text: only for a relay on the same host or
	// a test server, since the password crosses the wire in clear.
	EmailTLSNone EmailTLS = "none"
)

// DefaultEmailAttachmentBytes bounds one attachment of choir.email.send
// when the account sets no max_attachment_bytes.
const DefaultEmailAttachmentBytes = 10 << 20

// DefaultEmailWakePerHour bounds the turns an account's mail starts in an
// hour when the account sets no wake_per_hour: enough for a person who
// writes often, few enough that a loop the loop guard misses burns an
// hour's budget slowly rather than at once.
const DefaultEmailWakePerHour = 20

// maxEmailWakePerHour is the largest wake_per_hour: one a minute.
const maxEmailWakePerHour = 60

// EmailPolicy is what an email account allows the agents that use it,
// beside its servers: the sender, the recipients, approval, and whether
// inbound mail wakes the agent. Its fields sit flat in the account's JSON.
type EmailPolicy struct {
	// Address is the From address of mail sent from the account; empty
	// means Username, which must then be an address.
	Address string `json:"address"`
	// Username logs in to SMTP and IMAP; empty means Address. The
	// account's secret holds the password.
	Username string `json:"username,omitempty"`
	// TLS is "" (implicit TLS on 465/993, STARTTLS required elsewhere) or
	// "none".
	TLS EmailTLS `json:"tls,omitempty"`
	// RequireApproval makes every choir.email.send wait for a person's
	// approval before the mail goes out. It is in effect whatever it says
	// when AllowedRecipients is empty (NeedsApproval).
	RequireApproval bool `json:"require_approval,omitempty"`
	// AllowedRecipients are the addresses ("bob@example.com") and domains
	// ("@example.com") mail may be sent to; empty allows any, each mail
	// after a person's approval.
	AllowedRecipients []string `json:"allowed_recipients,omitempty"`
	// MaxAttachmentBytes bounds one attachment; 0 means
	// DefaultEmailAttachmentBytes.
	MaxAttachmentBytes int64 `json:"max_attachment_bytes,omitempty"`
	// Wake makes choird watch the account's WakeFolder while an agent
	// holds it and tell the agent of each new message: at once, as a turn
	// of its own, when WakeFrom allows the sender and the loop guard and
	// WakePerHour let it; otherwise in the next turn the user starts.
	Wake bool `json:"wake,omitempty"`
	// WakeFrom are the senders, addresses ("bob@example.com") or domains
	// ("@example.com"), whose mail may start a turn. Empty: none may, so
	// a stranger's mail never starts one.
	WakeFrom []string `json:"wake_from,omitempty"`
	// WakePerHour bounds the turns the account's mail starts in any hour,
	// per agent; 0 means DefaultEmailWakePerHour. Mail over it waits for
	// the user's next turn.
	WakePerHour int `json:"wake_per_hour,omitempty"`
	// WakeFolder is the folder watched; empty means INBOX.
	WakeFolder string `json:"wake_folder,omitempty"`
	// PollSeconds, when above zero, polls the folder at that interval
	// instead of using IMAP IDLE.
	PollSeconds int `json:"poll_seconds,omitempty"`
}

// Login is the account's user name for SMTP and IMAP.
func (p EmailPolicy) Login() string {
	if p.Username != "" {
		return p.Username
	}
	return p.Address
}

// Folder is the folder a wake watches.
func (p EmailPolicy) Folder() string {
	if p.WakeFolder != "" {
		return p.WakeFolder
	}
	return "INBOX"
}

// AttachmentLimit is the largest attachment choir.email.send accepts.
func (p EmailPolicy) AttachmentLimit() int64 {
	if p.MaxAttachmentBytes > 0 {
		return p.MaxAttachmentBytes
	}
	return DefaultEmailAttachmentBytes
}

// WakeLimit is the most turns the account's mail starts in an hour.
func (p EmailPolicy) WakeLimit() int {
	if p.WakePerHour > 0 {
		return p.WakePerHour
	}
	return DefaultEmailWakePerHour
}

// NeedsApproval reports whether each choir.email.send waits for a
// person's approval: when the account asks for it, and always when it may
// send to anyone, so that an account set up without allowed_recipients is
// safe rather than open. To send without approval, list the recipients.
func (p EmailPolicy) NeedsApproval() bool {
	return p.RequireApproval || len(p.AllowedRecipients) == 0
}

// MaySendTo reports whether the account may send to the bare address addr.
func (p EmailPolicy) MaySendTo(addr string) bool {
	return len(p.AllowedRecipients) == 0 || addressListed(p.AllowedRecipients, addr)
}

// MayWake reports whether mail from the bare address addr may start a
// turn: only when wake_from names it or its domain.
func (p EmailPolicy) MayWake(addr string) bool {
	return addressListed(p.WakeFrom, addr)
}

// addressListed reports whether list names addr or its domain, ignoring
// case.
func addressListed(list []string, addr string) bool {
	addr = strings.ToLower(addr)
	_, domain, _ := strings.Cut(addr, "@")
	for _, a := range list {
		a = strings.ToLower(a)
		if a == addr || strings.HasPrefix(a, "@") && a[1:] == domain {
			return true
		}
	}
	return false
}

// emailPolicy validates the policy fields of the account at p.
func (v *validator) emailPolicy(p string, e EmailPolicy) {
	if e.Address != "" {
		if a, err := mail.ParseAddress(e.Address); err != nil || a.Address != e.Address {
			v.add(sub(p, "address"), "must be a bare email address such as agent@example.com")
		}
	}
	if e.TLS != EmailTLSAuto && e.TLS != EmailTLSNone {
		v.add(sub(p, "tls"), `must be omitted (TLS on 465/993, STARTTLS elsewhere) or "none"`)
	}
	v.addressList(sub(p, "allowed_recipients"), e.AllowedRecipients)
	v.addressList(sub(p, "wake_from"), e.WakeFrom)
	if e.WakePerHour < 0 || e.WakePerHour > maxEmailWakePerHour {
		v.add(sub(p, "wake_per_hour"), "must be 0 (%d) or 1 to %d turns an hour, e.g. 10", DefaultEmailWakePerHour, maxEmailWakePerHour)
	}
	if e.MaxAttachmentBytes < 0 {
		v.add(sub(p, "max_attachment_bytes"), "must be 0 (10 MiB) or a positive number of bytes, e.g. 26214400")
	}
	if e.PollSeconds < 0 || e.PollSeconds > 86400 {
		v.add(sub(p, "poll_seconds"), "must be 0 (IMAP IDLE) or 1 to 86400 seconds, e.g. 300")
	}
}

// addressList validates a list of addresses and domains at p, as
// allowed_recipients and wake_from hold them.
func (v *validator) addressList(p string, list []string) {
	for i, r := range list {
		at := strings.IndexByte(r, '@')
		bad := at < 0 || strings.ContainsAny(r, " <>,")
		if !bad && at > 0 {
			a, err := mail.ParseAddress(r)
			bad = err != nil || a.Address != r
		}
		if bad || at == len(r)-1 {
			v.add(strictjson.PathIndex(p, i), `must be an address such as "bob@example.com" or a domain such as "@example.com"`)
		}
	}
}
