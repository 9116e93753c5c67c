package agent

import (
	"log/slog"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/email"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/mailbox"
	"github.com/choirhq/choir/rpc/egress"
)

// emailTools are the email tools bound to the session's leased account:
// they read the account from the current dynamic configuration at each
// call. With choird's egress gateway they reach the account through its
// mail route, and choird does the SMTP and IMAP with the password, which
// never enters the agent (issue 34); without one they declare the secret
// the account named when the session opened, and reach the servers
// themselves. A session without an account has no email tools: a model is
// not offered tools it cannot use (spec 8.6).
func (s *session) emailTools() []tool.Tool {
	name := s.hello.ResourceBindings.Email
	if name == "" {
		return nil
	}
	var secret string
	var tr email.Transport
	if s.egress != nil {
		tr = mailbox.Remote{URL: egress.ServiceURL(mailbox.Service, name)}
	} else if d := s.dyn.Load(); d != nil {
		secret = d.EmailAccounts[name].Secret
	}
	return email.Tools(email.Config{Secret: secret, Transport: tr, Approvals: approver{client: s.client}, Decisions: s.decisions,
		DialFunc: s.builtinDial("email"),
		Logger:   s.logger.With(slog.String("email_account", name)),
		AccountFunc: func() (string, config.EmailAccount, bool) {
			d := s.dyn.Load()
			if d == nil {
				return "", config.EmailAccount{}, false
			}
			a, ok := d.EmailAccounts[name]
			return name, a, ok
		}})
}
