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
)

func main() {
	fs := flag.NewFlagSet("choird", flag.ContinueOnError)
	home := fs.String("home", config.DefaultHome(), "the .choir.d directory (env CHOIR_HOME)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, daemon.Options{Home: *home}); err != nil {
		fmt.Fprintf(os.Stderr, "choird: %v\n", err)
		stop()
		os.Exit(1)
	}
}
