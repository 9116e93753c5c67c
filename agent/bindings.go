package agent

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/notion"
	"github.com/choirhq/choir/agent/tool/tts"
	"github.com/choirhq/choir/rpc/egress"
)

// secret is the session's secret lookup for tools: a name as it is, or a
// binding reference (tool.SecretNotion, tool.SecretTTS) resolved now, from
// the current dynamic configuration, to the secret of the resource bound
// to the session. Each tool is handed a lookup scoped to the names its
// runtime view declares, so only choir.notion.query reaches the Notion
// secret and only choir.tts.speak the TTS key.
func (s *session) secret(name string) (string, bool) {
	d := s.dyn.Load()
	switch name {
	case tool.SecretNotion:
		bound := s.hello.ResourceBindings.Notion
		if bound == "" || d == nil {
			return "", false
		}
		ni, ok := d.NotionIntegrations[bound]
		if !ok || ni.Secret == "" {
			return "", false
		}
		name = ni.Secret
	case tool.SecretTTS:
		v, err := s.voice()
		if err != nil || v.Secret == "" {
			return "", false
		}
		name = v.Secret
	}
	return s.secrets.get(name)
}

// voice resolves the session's current voice profile (its /voice
// override, else its binding), as the dynamic configuration has it now.
func (s *session) voice() (tts.Voice, error) {
	d := s.dyn.Load()
	if d == nil {
		return tts.ResolveVoice(s.hello.ResourceBindings.VoiceProfile, nil, nil)
	}
	profile := d.VoiceProfile
	if profile == "" {
		profile = s.hello.ResourceBindings.VoiceProfile
	}
	return tts.ResolveVoice(profile, d.VoiceProfiles, d.TTS)
}

// toolVoice is the voice choir.tts.speak speaks with: the session's
// current one, sent to its provider's service route when the session goes
// out through choird's egress gateway, which adds the key.
func (s *session) toolVoice() (tts.Voice, error) {
	v, err := s.voice()
	if err == nil && s.egress != nil {
		v.Endpoint, v.Gateway = egress.ServiceURL("tts", v.TTS), true
	}
	return v, err
}

// serviceTools configures the built-in tools that use the session's leased
// resources: they read the voice profile and the secrets at each call, and
// choir.tts.speak sends through the host tool choir.send.file. Through
// choird's egress gateway they call the service routes and hold no key.
func (s *session) serviceTools(cfg *builtin.Config) {
	cfg.Notion = notion.Config{Logger: s.logger, Gateway: s.egress != nil, EndpointFunc: func() string {
		bound := s.hello.ResourceBindings.Notion
		if s.egress != nil && bound != "" {
			return egress.ServiceURL("notion", bound)
		}
		if d := s.dyn.Load(); d != nil {
			return d.NotionIntegrations[bound].Endpoint
		}
		return ""
	}}
	cfg.TTS = tts.Config{Logger: s.logger, VoiceFunc: s.toolVoice,
		SendFunc: func(ctx context.Context, callID string, input json.RawMessage) (tool.Result, error) {
			return hostExecutor{client: s.client, log: s.log}.ExecuteHostTool(ctx, tool.NameSendFile, callID, input)
		},
		// The characters a call sent to the provider: the unit TTS is
		// billed in, and the hook usage accounting attaches to.
		UsageFunc: func(ctx context.Context, u tts.Usage) {
			s.logger.InfoContext(ctx, "tts usage", slog.String("voice_profile", u.Profile), slog.String("tts", u.TTS),
				slog.String("model", u.ModelID), slog.Int("characters", u.Characters), slog.Int("requests", u.Requests))
		}}
}
