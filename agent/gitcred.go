package agent

import (
	"context"
	"io"
	"log/slog"

	"github.com/choirhq/choir/agent/credhelper"
	"github.com/choirhq/choir/config"
)

// setupGitCredentials lets git push with the leased identity's token
// without ever holding it (spec 14.4, issue 29): the agent runs the
// identity's git proxy ([credhelper.Proxy]) on its loopback and returns,
// for each allowed host, the url.<proxy>.insteadOf pair that points git
// at it, for the agent's global git configuration (gitConfig). The proxy adds the token, from the
// agent's memory, to git's smart-HTTP requests for those hosts only.
// There is no credential helper and no credential socket: nothing a
// command of choir.exec can ask (git credential fill answers nothing),
// and no git process whose memory, environment or descriptors carry the
// token.
func setupGitCredentials(ctx context.Context, gi config.GitIdentity, secret func(string) (string, bool), logger *slog.Logger) ([][2]string, error) {
	if gi.Secret == "" || len(gi.Hosts) == 0 {
		return nil, nil
	}
	p := &credhelper.Proxy{Hosts: gi.Hosts, Logger: logger, TokenFunc: func() (string, bool) { return secret(gi.Secret) }}
	if err := p.Listen(ctx); err != nil {
		return nil, err
	}
	var insteadOf [][2]string
	for _, h := range gi.Hosts {
		insteadOf = append(insteadOf, [2]string{p.Prefix(h), "https://" + h + "/"})
	}
	return insteadOf, nil
}

// RunCredentialHelper is main for the binary invoked as git-cred-helper.
// The agent no longer hands its token to any helper (git reaches its
// remotes through the agent's proxy instead), so it answers nothing: a
// "get" is refused with the reason on stderr, as the protocol wants.
func RunCredentialHelper(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	h := &credhelper.Helper{TokenFunc: func(context.Context, credhelper.Request) (string, error) {
		return "", nil // Get denies: no token is ever given out
	}}
	for len(args) >= 2 && args[0] == "--allow" {
		h.AllowedHosts = append(h.AllowedHosts, args[1])
		args = args[2:]
	}
	return h.Run(ctx, args, stdin, stdout, stderr)
}
