package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

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
	go func() { <-ctx.Done(); ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
				token, ok := secret(gi.Secret)
				if gi.Secret == "" || !ok {
					logger.Warn("git asked for credentials, but the git identity has no token")
					return
				}
				io.WriteString(c, token+"\n") //nolint:errcheck
			}()
		}
	}()
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

// RunCredentialHelper is main for the binary invoked as git-cred-helper:
// args are what git passed after the program name (--allow hosts, then the
// action). The token comes from the running agent over its socket.
func RunCredentialHelper(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	h := &credhelper.Helper{TokenFunc: func(ctx context.Context) (string, error) {
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
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return "", errors.New("the agent has no token for this git identity")
		}
		return strings.TrimSuffix(line, "\n"), nil
	}}
	for len(args) >= 2 && args[0] == "--allow" {
		h.AllowedHosts = append(h.AllowedHosts, args[1])
		args = args[2:]
	}
	return h.Run(ctx, args, stdin, stdout, stderr)
}
