package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/choirhq/choir/agent/credhelper"
	"github.com/choirhq/choir/config"
)

// credSocket is where the running agent answers its own credential helper:
// a 0600 socket in the agent's private HOME, never in the workspace.
func credSocket(home string) string { return filepath.Join(home, ".choir", "cred.sock") }

// setupGitCredentials makes git use the agent binary as its credential
// helper (spec 14.4): a link named git-cred-helper to this binary, set as
// credential.helper with the identity's allowed hosts, and a socket on
// which the agent hands the token, from memory, to that helper. The token
// never touches a file, the environment or .git/config.
//
// Any process of the agent's user can connect to the socket, commands run
// by choir.exec included, so the agent checks each request itself: the
// token goes only to an HTTPS request for one of the identity's hosts, and
// every refusal is logged with what was asked.
func setupGitCredentials(ctx context.Context, gi config.GitIdentity, secret func(string) (string, bool), logger *slog.Logger) error {
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("no HOME for the credential helper: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir := filepath.Join(home, ".choir")
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o700); err != nil {
		return err
	}
	link := filepath.Join(dir, "bin", credhelper.Name)
	os.Remove(link)
	if err := os.Symlink(self, link); err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	sock := credSocket(home)
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("credential socket: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return err
	}
	go serveGitCredentials(ctx, ln, gi, secret, logger)
	// git learns of the helper only once the socket answers.
	helper := link
	for _, h := range gi.Hosts {
		helper += " --allow " + h
	}
	if out, err := gitCommand(ctx, "config", "--global", "credential.helper", helper); err != nil {
		return fmt.Errorf("git config credential.helper: %w: %s", err, out)
	}
	return nil
}

// serveGitCredentials answers the credential helper on ln until ctx ends:
// each connection gets the identity's token only for a request that the
// identity's allowed hosts admit.
func serveGitCredentials(ctx context.Context, ln net.Listener, gi config.GitIdentity, secret func(string) (string, bool), logger *slog.Logger) {
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			h := &credhelper.Helper{AllowedHosts: gi.Hosts, TokenFunc: func(context.Context, credhelper.Request) (string, error) {
				token, ok := secret(gi.Secret)
				if gi.Secret == "" || !ok {
					return "", nil // Get denies: the identity has no token
				}
				return token, nil
			}}
			if req, err := credhelper.Answer(ctx, c, h); err != nil {
				logger.Warn("git credential request refused", slog.String("protocol", req.Protocol),
					slog.String("host", req.Host), slog.String("reason", err.Error()))
			}
		}()
	}
}

// RunCredentialHelper is main for the binary invoked as git-cred-helper:
// args are what git passed after the program name (--allow hosts, then the
// action). The token comes from the running agent over its socket.
func RunCredentialHelper(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	h := &credhelper.Helper{TokenFunc: func(ctx context.Context, req credhelper.Request) (string, error) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", credSocket(home))
		if err != nil {
			return "", fmt.Errorf("the agent is not answering for credentials: %w", err)
		}
		defer c.Close()
		return credhelper.Ask(c, req)
	}}
	for len(args) >= 2 && args[0] == "--allow" {
		h.AllowedHosts = append(h.AllowedHosts, args[1])
		args = args[2:]
	}
	return h.Run(ctx, args, stdin, stdout, stderr)
}
