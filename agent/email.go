package agent

import (
	"log/slog"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/email"
	"github.com/choirhq/choir/config"
)

// emailTools are the email tools bound to the session's leased account:
// they read the account from the current dynamic configuration at each
// call, and declare the secret it named when the session opened. A session
// without an account has no email tools: a model is not offered tools it
// cannot use (spec 8.6).
func (s *session) emailTools() []tool.Tool {
	name := s.hello.ResourceBindings.Email
	if name == "" {
		return nil
	}
	var secret string
	if d := s.dyn.Load(); d != nil {
		secret = d.EmailAccounts[name].Secret
	}
	return email.Tools(email.Config{Secret: secret, Approvals: approver{client: s.client}, Decisions: s.decisions,
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
