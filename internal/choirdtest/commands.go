package choirdtest

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/dmcmd"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
)

// Commands is a choird without an agent runtime, with two regular DMs
// (alice, bound to assistant; bob, bound to helper), an unbound one
// (nobody) and the admin DM console, driven through its DM command layer.
type Commands struct {
	D       *Choird
	C       *dmcmd.Commands
	updates atomic.Int64

	mu    sync.Mutex
	notes []string
}

func SetupCommands(t testing.TB) *Commands {
	t.Helper()
	d := StartTwoAgents(t, Options{Edit: func(c *config.Config, _ config.Secrets) {
		FastHeartbeat(c, nil)
		c.DMs["alice"] = config.DM{Gateway: "console", UserID: "alice"}
		c.DMs["bob"] = config.DM{Gateway: "console", UserID: "bob"}
		c.DMs["nobody"] = config.DM{Gateway: "console", UserID: "nobody"}
		a := c.Agents["assistant"]
		a.Defaults.DM = "alice"
		c.Agents["assistant"] = a
		h := c.Agents["helper"]
		h.Defaults.DM, h.Defaults.Workspace = "bob", "other"
		c.Agents["helper"] = h
		c.Models["big"] = c.Models["local"]
		c.TTS = map[string]config.TTS{"eleven": {Provider: "elevenlabs", ModelID: "eleven_v2", Endpoint: "http://127.0.0.1:9"}}
		c.VoiceProfiles = map[string]config.VoiceProfile{
			"calm":   {TTS: "eleven", VoiceID: "v-calm", OutputFormat: "mp3_44100_128", VoiceSettings: config.VoiceSettings{Speed: 1}},
			"bright": {TTS: "eleven", VoiceID: "v-bright", OutputFormat: "mp3_44100_128", VoiceSettings: config.VoiceSettings{Speed: 1}},
		}
	}})
	b := &Commands{D: d}
	b.C = d.NewCommands(func(_ context.Context, cmd gateway.Command, text string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.notes = append(b.notes, cmd.DM.Name+": "+text)
	})
	t.Cleanup(b.C.Wait)
	return b
}

// DMOf is the console DM name as the gateway gives it to commands.
func DMOf(name string) gateway.DM {
	return gateway.DM{Gateway: "console", Name: name, UserID: name, Admin: name == "console"}
}

// Command parses text as the gateway does and gives it a fresh update id.
func (b *Commands) Command(t testing.TB, dm, text string) gateway.Command {
	t.Helper()
	name, args, rest, ok := gateway.ParseCommand(text, "")
	if !ok {
		t.Fatalf("%q is not a command", text)
	}
	return gateway.Command{DM: DMOf(dm), UpdateID: b.updates.Add(1), ChatID: DMOf(dm).UserID, MessageID: 1000 + b.updates.Load(),
		Name: name, Args: args, Text: rest}
}

// Run runs cmd and returns the reply.
func (b *Commands) Run(t testing.TB, cmd gateway.Command) string {
	t.Helper()
	reply, err := b.C.Command(context.Background(), cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd.Name, err)
	}
	return reply
}

// Send runs text from dm and returns the reply.
func (b *Commands) Send(t testing.TB, dm, text string) string {
	t.Helper()
	return b.Run(t, b.Command(t, dm, text))
}

// TakeNotes waits for the long commands and returns what they sent.
func (b *Commands) TakeNotes() []string {
	b.C.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.notes
	b.notes = nil
	return out
}

// RequestApproval asks for an approval as a's agent does before a
// choir.exec, and returns its id.
func RequestApproval(t testing.TB, a *StandIn, summary string) string {
	t.Helper()
	ctx := client.WithRequestID(context.Background(), "req-"+strings.ReplaceAll(summary, " ", "-"))
	resp, err := a.Client.RequestApproval(ctx, rpc.ApprovalRequest{RequestType: "tool:choir.exec", Summary: summary,
		Payload: json.RawMessage(`{"command":"true"}`)})
	if err != nil {
		t.Fatalf("REQUEST_APPROVAL: %v", err)
	}
	return resp.ApprovalID
}

// Refused reports whether reply is a refusal.
func Refused(reply string) bool { return strings.HasPrefix(reply, "Refused") }
