package credhelper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// The agent answers its helper over a Unix socket, and anything that can
// reach the socket can ask: a command run by choir.exec as much as git.
// So the helper sends the request itself (protocol and host, in the
// credential protocol's key=value form, ended by a blank line), and the
// agent checks it against the identity's allowed hosts before it answers
// with one line: "token=<token>" or "denied=<reason>".

// answerTimeout bounds one exchange on the socket.
const answerTimeout = 5 * time.Second

// Answer serves one connection on the agent's side: it reads the request,
// and hands over the token only if h.Allowed passes it. It returns the
// request and nil when the token was handed over, or an error saying what
// was refused and why (wrapping [ErrDenied] for a request that may not
// have the token), for the agent's log.
func Answer(ctx context.Context, conn net.Conn, h *Helper) (Request, error) {
	conn.SetDeadline(time.Now().Add(answerTimeout)) //nolint:errcheck
	req, err := ReadRequest(conn)
	if err != nil {
		return req, err
	}
	cred, err := h.Get(ctx, req)
	if err != nil {
		reason := strings.NewReplacer("\n", " ", "\r", " ").Replace(err.Error())
		io.WriteString(conn, "denied="+reason+"\n") //nolint:errcheck
		return req, err
	}
	if _, err := io.WriteString(conn, "token="+cred.Password+"\n"); err != nil {
		return req, fmt.Errorf("send the token: %w", err)
	}
	return req, nil
}

// Ask is the helper's side: it sends req over conn and returns the token,
// or an error wrapping [ErrDenied] with the agent's reason.
func Ask(conn net.Conn, req Request) (string, error) {
	conn.SetDeadline(time.Now().Add(answerTimeout)) //nolint:errcheck
	for _, kv := range [][2]string{{"protocol", req.Protocol}, {"host", req.Host}} {
		if err := checkValue(kv[0], kv[1]); err != nil {
			return "", err
		}
	}
	if _, err := fmt.Fprintf(conn, "protocol=%s\nhost=%s\n\n", req.Protocol, req.Host); err != nil {
		return "", fmt.Errorf("ask the agent: %w", err)
	}
	line, err := bufio.NewReader(io.LimitReader(conn, maxRequestBytes)).ReadString('\n')
	if err != nil {
		return "", errors.New("the agent did not answer for this git identity")
	}
	line = strings.TrimSuffix(line, "\n")
	if tok, ok := strings.CutPrefix(line, "token="); ok {
		return tok, nil
	}
	if reason, ok := strings.CutPrefix(line, "denied="); ok {
		return "", fmt.Errorf("%w by the agent: %s", ErrDenied, reason)
	}
	return "", errors.New("the agent answered something unexpected")
}
