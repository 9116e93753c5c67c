// Command choir-agent is the agent runtime that runs inside each agent's
// container (or as a child process of choird with the process runtime).
// Identity comes from the environment choird sets: CHOIR_AGENT_ID,
// CHOIR_SESSION_ID and CHOIR_LEASE_TOKEN; never a secret.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/choirhq/choir/agent"
	"github.com/choirhq/choir/agent/credhelper"
	"github.com/choirhq/choir/rpc"
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
	fs := flag.NewFlagSet("choir-agent", flag.ContinueOnError)
	var o agent.Options
	fs.StringVar(&o.ControlPlane, "control-plane", envOr("CHOIR_CONTROL_PLANE", rpc.TransportUDS), "transport to choird: uds or http")
	fs.StringVar(&o.Socket, "socket", envOr("CHOIR_SOCKET", rpc.DefaultSocket), "choird's socket, for uds")
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
	o.AgentID, o.SessionID, o.LeaseToken = os.Getenv("CHOIR_AGENT_ID"), os.Getenv("CHOIR_SESSION_ID"), os.Getenv("CHOIR_LEASE_TOKEN")
	o.Sandboxed = os.Getenv("CHOIR_RUNTIME") == "docker"
	// The token is in the environment only to reach this process; drop it
	// from the environment of everything the agent starts.
	os.Unsetenv("CHOIR_LEASE_TOKEN")
	if o.AgentID == "" || o.SessionID == "" || o.LeaseToken == "" {
		fmt.Fprintln(os.Stderr, "choir-agent: CHOIR_AGENT_ID, CHOIR_SESSION_ID and CHOIR_LEASE_TOKEN must be set; choird sets them when it starts an agent")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "choir-agent: %v\n", err)
		stop()
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
