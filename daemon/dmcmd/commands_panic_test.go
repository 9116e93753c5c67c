package dmcmd

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/internal/logbuf"
)

// TestLongCommandPanicFailsOnlyTheCommand: a panic in the background part
// of a long DM command is answered as that command's failure and logged;
// choird (here, the test process) goes on.
func TestLongCommandPanicFailsOnlyTheCommand(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	c := &Commands{logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	cmd := gateway.Command{DM: gateway.DM{Gateway: "console", Name: "console", UserID: "console", Admin: true}, Name: "update"}
	var out string
	var err error
	done := make(chan struct{})
	c.bg.Go(func() {
		defer close(done)
		out, err = c.runRecovered(context.Background(), cmd, func(context.Context) (string, error) {
			var m map[string]int
			m["boom"]++ // a nil map write: a real runtime panic
			return "unreachable", nil
		})
	})
	<-done
	if err == nil || !strings.Contains(err.Error(), "/update stopped on an internal error") {
		t.Fatalf("runRecovered = %q, %v; want the command's internal error", out, err)
	}
	if !strings.Contains(logs.String(), `"msg":"dm command panicked"`) || !strings.Contains(logs.String(), "goroutine") {
		t.Errorf("the panic and its stack were not logged: %s", logs.String())
	}
}
