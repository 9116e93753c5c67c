// Command choird is Choir's host daemon.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/internal/logjson"
)

func main() {
	fs := flag.NewFlagSet("choird", flag.ContinueOnError)
	home := fs.String("home", config.DefaultHome(), "the .choir.d directory (env CHOIR_HOME)")
	transport := fs.String("transport", daemon.TransportUDS, "agent protocol transport: uds or http")
	listen := fs.String("listen", "127.0.0.1:9400", "address for --transport=http (with --runtime=docker, one containers reach: 172.17.0.1:9400 or 0.0.0.0:9400)")
	tlsCert := fs.String("tls-cert", "", "TLS certificate for --transport=http (default: self-signed in .choir.d/tls)")
	tlsKey := fs.String("tls-key", "", "TLS key for --tls-cert")
	rt := fs.String("runtime", "docker", "agent runtime: docker, or process (the agent binary as a child process, for development)")
	agentBinary := fs.String("agent-binary", "", "choir-agent for --runtime=process (default: next to choird)")
	agentImage := fs.String("agent-image", "", "image for every agent under docker (default: choir-agent-<id>:latest)")
	osImage := fs.String("os-image", "", "OS image agent builds start from (Dockerfile.base's CHOIR_OS_IMAGE)")
	telegramAPI := fs.String("telegram-api-url", "", "Telegram Bot API server (default https://api.telegram.org; tests point it at a local fake)")
	logFormat := fs.String("log-format", logjson.FormatAuto, "log lines on stderr: auto (text on a terminal, else json), text or json; logs/choird.log is always json")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if _, err := logjson.ParseFormat(*logFormat); err != nil {
		fmt.Fprintf(os.Stderr, "choird: --log-format: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, daemon.Options{Home: *home, Transport: *transport, Listen: *listen,
		TLSCert: *tlsCert, TLSKey: *tlsKey, Runtime: *rt, AgentBinary: *agentBinary, AgentImage: *agentImage, OSImage: *osImage,
		TelegramAPIURL: *telegramAPI, LogFormat: *logFormat}); err != nil {
		fmt.Fprintf(os.Stderr, "choird: %v\n", err)
		stop()
		os.Exit(1)
	}
}
