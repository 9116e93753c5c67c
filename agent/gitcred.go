package agent

import (
	"context"
	"io"

	"github.com/choirhq/choir/agent/credhelper"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc/egress"
)

// gitRoutes lets git push and fetch with the leased identity's token
// without the agent ever holding it (issue 34): for each host of the
// identity, the url.<route>.insteadOf pair, for the agent's global git
// configuration (gitConfig), that sends git's requests for https://<host>/
// to choird's git route for the identity (rpc/egress.GitPath), through
// the tools' loopback proxy at proxy, which carries them to the gateway.
// choird adds the token there, for the identity the session is bound to,
// its hosts and its repositories only. Nothing a command of choir.exec can
// ask holds the token: not git credential fill (no helper answers), not
// the agent's memory, not choird (GET_SECRETS refuses it). Without a
// gateway (proxy empty) or a secret there is no route, and git reaches
// its remotes as any tool does.
func gitRoutes(identity string, gi config.GitIdentity, proxy string) [][2]string {
	if proxy == "" || gi.Secret == "" {
		return nil
	}
	var insteadOf [][2]string
	for _, h := range gi.Hosts {
		insteadOf = append(insteadOf, [2]string{"http://" + proxy + egress.GitPath(identity, h), "https://" + h + "/"})
	}
	return insteadOf
}

// RunCredentialHelper is main for the binary invoked as git-cred-helper.
// The agent no longer hands its token to any helper (git reaches its
// remotes through choird's git route instead), so it answers nothing: a
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
