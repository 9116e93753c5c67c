package daemon

import (
	"context"

	"github.com/choirhq/choir/daemon/gateway"
)

// dmCommands returns the slash-command table of the Telegram DMs.
// Placeholder until the command layer lands: it answers every command with
// the approval commands only.
func (d *Daemon) dmCommands() gateway.Commands { return placeholderCommands{d} }

type placeholderCommands struct{ d *Daemon }

func (c placeholderCommands) Command(ctx context.Context, cmd gateway.Command) (string, error) {
	return "commands are not wired yet", nil
}
