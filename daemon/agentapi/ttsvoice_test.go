package agentapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/netout"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"github.com/choirhq/choir/agent/tool/tts"
	"github.com/choirhq/choir/agent/tool/tts/ttstest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/egress"
)

const (
	ttsToken = "4545:tts-token"
	ttsUser  = int64(4501)
)

// TestSpokenReplyArrivesAsAVoiceMessage runs choir.tts.speak with send as
// a session's agent does, over the agent protocol: the voice profile comes
// from choird's dynamic configuration at each call, the audio from a fake
// ElevenLabs reached through choird's egress gateway, which adds the key
// (GET_SECRETS refuses it to the agent), and
// choir.send.file hands it to the fake Bot API, where it arrives through
// sendVoice as OGG Opus. The user's /voice in the DM switches the voice of
// the next call.
func TestSpokenReplyArrivesAsAVoiceMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tg := telegramtest.NewServer(t)
	bot := tg.AddBot(ttsToken, "choir_tts_bot")
	eleven := ttstest.NewServer(t)
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{
		Edit: func(cfg *config.Config, secrets config.Secrets) {
			cfg.Gateways["tg"] = config.Gateway{Type: config.GatewayTelegram, Secret: "tg-token"}
			secrets["tg-token"] = ttsToken
			cfg.DMs["alice"] = config.DM{Gateway: "tg", UserID: strconv.FormatInt(ttsUser, 10)}
			cfg.TTS = map[string]config.TTS{
				"eleven": {Provider: "elevenlabs", ModelID: "eleven_multilingual_v2", Endpoint: eleven.Endpoint(), Secret: "eleven-key"},
			}
			cfg.VoiceProfiles = map[string]config.VoiceProfile{
				"calm":   {TTS: "eleven", VoiceID: "v-calm", OutputFormat: "opus_48000_64", VoiceSettings: config.VoiceSettings{Speed: 1}},
				"bright": {TTS: "eleven", VoiceID: "v-bright", OutputFormat: "mp3_44100_96", VoiceSettings: config.VoiceSettings{Speed: 1.1}},
			}
			secrets["eleven-key"] = eleven.Key
			a := cfg.Agents["assistant"]
			a.Defaults.DM, a.Defaults.VoiceProfile = "alice", "calm"
			cfg.Agents["assistant"] = a
			cfg.CrashDetectionThresholdMS = 300_000
		},
		Daemon: daemon.Options{TelegramAPIURL: tg.URL()},
	})
	id, token := d.StartSession(t, "assistant")
	cl, err := client.New(client.Options{Socket: d.Socket(), SessionID: id, LeaseToken: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if _, err := cl.InitHello(ctx, rpc.InitHelloRequest{AgentID: "assistant", SessionID: id, ImageVersion: "img-1",
		ToolManifestHash: "t1", SkillManifestHash: "s1"}); err != nil {
		t.Fatalf("INIT_HELLO: %v", err)
	}
	// The agent's way out: choird's egress gateway, as the session.
	dialer := &netout.Dialer{Socket: daemon.EgressSocketPath(d.Home), SessionID: id, LeaseTokenFunc: func() string { return token }}

	b := tooltest.Setup(t, builtin.Config{TTS: tts.Config{
		HTTPClient: &http.Client{Transport: dialer.Transport(egress.OriginService)},
		VoiceFunc: func() (tts.Voice, error) {
			dc := fetchDynamic(t, cl)
			v, err := tts.ResolveVoice(dc.VoiceProfile, dc.VoiceProfiles, dc.TTS)
			v.Endpoint, v.Gateway = egress.ServiceURL("tts", v.TTS), true
			return v, err
		},
		SendFunc: func(ctx context.Context, callID string, in json.RawMessage) (tool.Result, error) {
			resp, err := cl.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: tool.NameSendFile, CallID: callID, Input: in})
			if err != nil {
				return tool.Result{}, err
			}
			if resp.Status != rpc.ToolSuccess {
				return tool.Result{Status: tool.StatusError, Summary: string(resp.Status), Output: resp.Output}, nil
			}
			return tool.SuccessResult("sent", resp.Output), nil
		}}})
	b.WS = d.Workspace("main")
	b.Env.Workspace = b.WS
	if _, err := cl.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"eleven-key"}}); err == nil ||
		!strings.Contains(err.Error(), "egress gateway") {
		t.Errorf("GET_SECRETS of the TTS key: %v, want a refusal naming the egress gateway", err)
	}

	speak := func(text string) telegramtest.Message {
		t.Helper()
		before := len(bot.SentTo(ttsUser))
		r := b.MustCall(t, tts.Name, fmt.Sprintf(`{"text": %q, "send": true, "caption": "spoken"}`, text))
		if r.Status != tool.StatusSuccess {
			t.Fatalf("speak: %s", r.Summary)
		}
		choirdtest.WaitFor(t, "the voice message to reach the bot", d.Logs, func() bool { return len(bot.SentTo(ttsUser)) > before })
		m := bot.SentTo(ttsUser)[before]
		if m.Method != "sendVoice" || m.File == nil || m.Text != "spoken" {
			t.Fatalf("sent %s %q (file %v), want sendVoice with the caption", m.Method, m.Text, m.File != nil)
		}
		if !bytes.HasPrefix(m.File.Data, []byte("OggS")) || !bytes.Contains(m.File.Data[:64], []byte("OpusHead")) {
			t.Fatalf("the voice message is not OGG Opus: % x", m.File.Data[:min(len(m.File.Data), 64)])
		}
		return m
	}

	speak("Your train leaves at nine.")
	if c := eleven.Calls(); len(c) != 1 || c[0].VoiceID != "v-calm" || c[0].Format != "opus_48000_64" {
		t.Fatalf("first call %+v", c)
	}

	// The user switches the voice in the DM; the next call speaks with it.
	before := len(bot.SentTo(ttsUser))
	bot.SendText(ttsUser, "/voice bright")
	choirdtest.WaitFor(t, "the /voice reply", d.Logs, func() bool { return len(bot.SentTo(ttsUser)) > before })
	if reply := bot.SentTo(ttsUser)[before].Text; !strings.Contains(reply, "bright") {
		t.Fatalf("/voice bright answered %q", reply)
	}
	speak("And now brightly.")
	if c := eleven.Calls(); len(c) != 2 || c[1].VoiceID != "v-bright" || c[1].Format != "opus_48000_96" || c[1].Body.VoiceSettings["speed"] != 1.1 {
		t.Fatalf("after /voice: %+v", c[len(c)-1])
	}
}

// fetchDynamic fetches the session's whole dynamic configuration, as the
// agent does when choird says it changed.
func fetchDynamic(t *testing.T, cl *client.Client) rpc.DynamicConfig {
	t.Helper()
	resp, err := cl.FetchDynamicConfig(context.Background(), rpc.FetchDynamicConfigRequest{})
	if err != nil {
		t.Errorf("FETCH_DYNAMIC_CONFIG: %v", err)
		return rpc.DynamicConfig{}
	}
	var dc rpc.DynamicConfig
	if err := json.Unmarshal(resp.Config, &dc); err != nil {
		t.Errorf("decode dynamic config: %v", err)
	}
	return dc
}
