// Command choirctl is the operator's command line for Choir.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/choirhq/choir/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
