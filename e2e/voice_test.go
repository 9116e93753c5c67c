package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/tool/tts/ttstest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestVoiceReplyThroughTheAgent is issue 17's spoken reply through every
// real piece: alice asks in her DM, the agent (a child process of choird)
// calls choir.tts.speak with send, which resolves the session's voice
// profile and its provider's key at call time, speaks through a fake
// ElevenLabs that answers real Ogg Opus, and hands the file to
// choir.send.file; the fake Bot API receives it through sendVoice. Alice's
// /voice then switches the voice of the next call.
func TestVoiceReplyThroughTheAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	speak := func(id, text string) llmtest.Step {
		return llmtest.ToolCalls(llmtest.Call{ID: id, Name: "choir.tts.speak",
			Arguments: fmt.Sprintf(`{"text": %q, "send": true, "caption": "spoken"}`, text)})
	}
	llm := llmtest.NewServer(t,
		speak("v1", "Sunny and warm today."),
		llmtest.Text("I sent you a voice message."),
		speak("v2", "Still sunny."),
		llmtest.Text("Sent again, brighter."),
		summaryReply,
	)
	eleven := ttstest.NewServer(t)
	h := choirdtest.WriteHome(t, choirdtest.Options{ModelEndpoint: llm.BaseURL(), FastHeartbeat: true,
		Edit: func(cfg *config.Config, secrets config.Secrets) {
			cfg.Gateways[gatewayTG] = config.Gateway{Type: config.GatewayTelegram, Secret: "telegram-bot"}
			secrets["telegram-bot"] = botToken
			cfg.DMs[dmAlice] = config.DM{Gateway: gatewayTG, UserID: fmt.Sprint(userAlice)}
			cfg.TTS = map[string]config.TTS{"eleven": {Provider: "elevenlabs", ModelID: "eleven_multilingual_v2",
				Endpoint: eleven.Endpoint(), Secret: "eleven-key"}}
			cfg.VoiceProfiles = map[string]config.VoiceProfile{
				"calm":   {TTS: "eleven", VoiceID: "v-calm", OutputFormat: "opus_48000_64", VoiceSettings: config.VoiceSettings{Speed: 1}},
				"bright": {TTS: "eleven", VoiceID: "v-bright", OutputFormat: "opus_48000_96", VoiceSettings: config.VoiceSettings{Speed: 1.1}},
			}
			secrets["eleven-key"] = eleven.Key
			a := cfg.Agents["assistant"]
			a.Defaults.DM, a.Defaults.VoiceProfile = dmAlice, "calm"
			cfg.Agents["assistant"] = a
		}})
	srv := telegramtest.NewServer(t)
	e := &tgEnv{Home: h, tg: srv, bot: srv.AddBot(botToken, botName), llm: llm}
	t.Cleanup(func() { killAgents(t, h.Dir) })
	e.dumpLogsOnFailure(t, "assistant")
	d := e.runChoird(t)
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: actorAdmin}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	pool := d.Pool()
	sessionID := liveSession(t, pool, "assistant")

	isVoice := func(m telegramtest.Message) bool { return m.Method == "sendVoice" }
	voices := func() []telegramtest.Message {
		var out []telegramtest.Message
		for _, m := range e.bot.SentTo(userAlice) {
			if isVoice(m) {
				out = append(out, m)
			}
		}
		return out
	}
	e.bot.SendText(userAlice, "read me the forecast")
	waitSentTo(t, e.bot, userAlice, "the voice message", isVoice)
	waitSentTo(t, e.bot, userAlice, "the reply", containsText("I sent you a voice message"))

	e.bot.SendText(userAlice, "/voice bright")
	waitSentTo(t, e.bot, userAlice, "the /voice answer", containsText("bright"))
	waitUntil(t, "the agent to fetch the override", func() bool {
		var fetched bool
		pool.QueryRow(ctx, "SELECT fetched_rev = rev FROM choir_control.session_overrides WHERE session_id = $1",
			sessionID).Scan(&fetched) //nolint:errcheck
		return fetched
	})
	e.bot.SendText(userAlice, "again please")
	waitSentTo(t, e.bot, userAlice, "the second reply", containsText("Sent again"))
	waitUntil(t, "the second voice message", func() bool { return len(voices()) == 2 })

	for i, m := range voices() {
		if m.File == nil || !bytes.HasPrefix(m.File.Data, []byte("OggS")) || !bytes.Contains(m.File.Data[:64], []byte("OpusHead")) ||
			m.Text != "spoken" {
			t.Errorf("voice message %d is not OGG Opus with its caption: %+v", i, m)
		}
	}
	calls := eleven.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d TTS requests, want 2", len(calls))
	}
	if c := calls[0]; c.VoiceID != "v-calm" || c.Format != "opus_48000_64" || c.Key != eleven.Key || c.Body.Text != "Sunny and warm today." {
		t.Errorf("first TTS request %+v", c)
	}
	if c := calls[1]; c.VoiceID != "v-bright" || c.Format != "opus_48000_96" || c.Body.VoiceSettings["speed"] != 1.1 {
		t.Errorf("after /voice bright: %+v", c)
	}
	if log := e.agentLog("assistant"); !strings.Contains(log, "tts usage") {
		t.Errorf("the agent logged no TTS usage")
	}
	stopAgent(t, d.Daemon, "assistant")
	llm.Done()
}
