// Command choir-agent is the agent runtime that runs inside each agent's
// container (or as a child process of choird with the process runtime).
// Identity comes from the environment choird sets (CHOIR_AGENT_ID,
// CHOIR_SESSION_ID), never a secret; the lease token arrives on standard
// input (CHOIR_LEASE_TOKEN_FD=0), never in the environment, where every
// command the agent runs could read it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/choirhq/choir/agent"
	"github.com/choirhq/choir/agent/credhelper"
	"github.com/choirhq/choir/agent/sandbox"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/egress"
)

// Where the lease token comes from.
const (
	envTokenFD = "CHOIR_LEASE_TOKEN_FD"
	// envToken is refused: a token in the environment stays readable in
	// /proc/<pid>/environ whatever the agent unsets.
	envToken = "CHOIR_LEASE_TOKEN"
	// maxTokenBytes bounds what is read from standard input.
	maxTokenBytes = 1024
	// tokenTimeout bounds the wait for the token's end of file.
	tokenTimeout = 30 * time.Second
)

func main() {
	if credhelper.Invoked(os.Args[0]) {
		// git runs the agent binary as its credential helper (spec 14.4).
		if err := agent.RunCredentialHelper(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "git-cred-helper: %v\n", err)
			os.Exit(1)
		}
		return
	}
	// Before anything else, and before the token is read: what the agent
	// starts shares its user, and must not read its memory, environment
	// or descriptors through /proc.
	if err := sandbox.Harden(); err != nil {
		fmt.Fprintf(os.Stderr, "choir-agent: %v\n", err)
		os.Exit(1)
	}
	fs := flag.NewFlagSet("choir-agent", flag.ContinueOnError)
	var o agent.Options
	fs.StringVar(&o.ControlPlane, "control-plane", envOr("CHOIR_CONTROL_PLANE", client.TransportUDS), "transport to choird: uds or http")
	fs.StringVar(&o.Socket, "socket", envOr("CHOIR_SOCKET", client.DefaultSocket), "choird's socket, for uds")
	fs.StringVar(&o.EgressSocket, "egress-socket", os.Getenv(egress.EnvSocket), "choird's egress gateway socket")
	fs.StringVar(&o.Endpoint, "endpoint", os.Getenv("CHOIR_ENDPOINT"), "choird's URL, for http")
	fs.StringVar(&o.CACert, "ca-cert", os.Getenv("CHOIR_CA_CERT"), "PEM certificate to trust for --endpoint")
	fs.StringVar(&o.Workspace, "workspace", envOr("CHOIR_WORKSPACE", "/workspace"), "the leased workspace")
	fs.StringVar(&o.ChoirDir, "choir-dir", envOr("CHOIR_DIR", "/choir"), "the image's tools, skills and identity")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if *version {
		fmt.Println(agent.Version)
		return
	}
	o.AgentID, o.SessionID = os.Getenv("CHOIR_AGENT_ID"), os.Getenv("CHOIR_SESSION_ID")
	// The self-check is skipped only when choird says explicitly that it
	// runs the agent as a process; anything else, an unset variable
	// included, must be the hardened container.
	o.Sandboxed = os.Getenv("CHOIR_RUNTIME") != "process"
	if _, ok := os.LookupEnv(envToken); ok {
		fmt.Fprintf(os.Stderr, "choir-agent: refusing %s in the environment: every command the agent runs could read it there; "+
			"choird passes the token on standard input with %s=0\n", envToken, envTokenFD)
		os.Exit(2)
	}
	if o.AgentID == "" || o.SessionID == "" || os.Getenv(envTokenFD) != "0" {
		fmt.Fprintf(os.Stderr, "choir-agent: CHOIR_AGENT_ID, CHOIR_SESSION_ID and %s=0 must be set, with the lease token on standard input; choird does this when it starts an agent\n", envTokenFD)
		os.Exit(2)
	}
	token, err := readToken()
	if err != nil {
		fmt.Fprintf(os.Stderr, "choir-agent: lease token: %v\n", err)
		os.Exit(2)
	}
	o.LeaseToken = token
	if faultHook != nil {
		o.Fault = faultHook
		setFaultDir(o.Workspace)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "choir-agent: %v\n", err)
		stop()
		if errors.Is(err, agent.ErrOrphaned) {
			releaseGroup(o.Sandboxed)
			os.Exit(exitOrphaned)
		}
		os.Exit(1)
	}
}

// exitOrphaned is the exit status of an agent that stopped because choird
// stayed out of reach.
const exitOrphaned = 3

// releaseGroup ends what the agent's tools left running, when no choird
// will: under the process runtime the agent leads its own process group
// (choird kills the group when the agent exits, but choird is gone). In
// a container the agent's exit ends them all.
func releaseGroup(sandboxed bool) {
	pid := os.Getpid()
	if sandboxed || pid <= 1 || syscall.Getpgrp() != pid {
		return
	}
	signal.Ignore(syscall.SIGTERM)
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
		fmt.Fprintf(os.Stderr, "choir-agent: end the process group: %v\n", err)
	}
}

// readToken reads the lease token from standard input to end of file, then
// puts /dev/null in its place, so that nothing the agent starts inherits
// the pipe.
func readToken() (string, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, maxTokenBytes+1))
		ch <- result{b, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-time.After(tokenTimeout):
		return "", fmt.Errorf("standard input did not end within %s", tokenTimeout)
	}
	if r.err != nil {
		return "", fmt.Errorf("read standard input: %w", r.err)
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return "", err
	}
	defer devNull.Close()
	if err := syscall.Dup3(int(devNull.Fd()), 0, 0); err != nil {
		return "", fmt.Errorf("replace standard input with %s: %w", os.DevNull, err)
	}
	token := strings.TrimSpace(string(r.b))
	switch {
	case len(r.b) > maxTokenBytes:
		return "", fmt.Errorf("more than %d bytes on standard input", maxTokenBytes)
	case token == "":
		return "", errors.New("standard input held no token")
	}
	return token, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
