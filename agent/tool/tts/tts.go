// Package tts is the choir.tts.speak tool (spec 8.7, 21.3): it speaks a
// text with the session's current voice profile, resolved at every call
// (so a /voice switch takes effect on the next one), through the
// ElevenLabs text-to-speech API, and writes the audio as an OGG Opus voice
// message to .choirtmp/send under the choirtmp:X lock; with send it also
// hands the file to choir.send.file in the same call.
//
// # Why OGG Opus from the provider
//
// Telegram plays only OGG Opus as a voice message. ElevenLabs encodes Opus
// itself (the opus_48000_* output formats), so the tool always asks for
// Opus: the profile's own opus format, or the Opus format nearest the bit
// rate of its mp3 format. No ffmpeg or opus-tools is needed in the agent
// image. A long text is split at sentence boundaries within the model's
// per-request limit, each part is spoken with its neighbours as context,
// and the parts' Opus packets are joined into one Ogg stream without
// re-encoding (see ogg.go).
//
// The key is the TTS provider's, obtained through the binding reference
// [tool.SecretTTS] and no other way; through choird's egress gateway
// ([Voice.Gateway]) the tool holds no key, and the gateway adds it. [Config.UsageFunc] is told the
// characters each call sent to the provider, for usage accounting.
package tts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/choirhq/choir/rpc/usage"
	"log/slog"
	"net/http"
	"os"
	"path"
	"time"
	"unicode/utf8"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
)

// Name is the tool's name.
const Name = tool.NameTTSSpeak

// SendDir is where the tool writes audio, relative to the workspace: the
// directory choir.send.file sends from.
const SendDir = tool.ChoirTmpDir + "/send"

// maxTextChars bounds one call's text (a few minutes of speech; each
// character is billed).
const maxTextChars = 50_000

// Usage is what one call consumed of the provider: the characters it sent
// (the unit ElevenLabs bills) in how many requests, and with which voice.
type Usage struct {
	Profile, TTS, Provider, ModelID, VoiceID string
	Characters, Requests                     int
	// PricePer1KCharacters is the provider's configured price
	// (tts.<name>.price_per_1k_characters); zero when unpriced.
	PricePer1KCharacters float64
	// Metered are the requests choird's egress gateway metered, each
	// under its own spend key; empty when the call went to the provider
	// directly.
	Metered []MeteredRequest
}

// MeteredRequest is one request spoken through the egress gateway: the
// spend key it was metered under and its characters.
type MeteredRequest struct {
	SpendKey   string
	Characters int
}

// Records are u as usage records: characters spoken by the provider, and
// their cost at the configured price (none configured: unpriced, as
// ElevenLabs bills by plan). A call through the gateway has a record per
// request, carrying its spend key, so that the usage views count each
// once beside the gateway's own record of it.
func (u Usage) Records() []usage.Record {
	service := u.TTS
	if u.ModelID != "" {
		service += "/" + u.ModelID
	}
	record := func(chars int, key string) usage.Record {
		r := usage.Record{Kind: usage.KindTTS, Service: service, Units: int64(chars), Unit: usage.UnitCharacters, SpendKey: key}
		if u.PricePer1KCharacters > 0 {
			r.CostUSD, r.CostSource = float64(chars)*u.PricePer1KCharacters/1000, usage.CostPrices
		}
		return r
	}
	if len(u.Metered) == 0 {
		return []usage.Record{record(u.Characters, "")}
	}
	out := make([]usage.Record, 0, len(u.Metered))
	for _, m := range u.Metered {
		out = append(out, record(m.Characters, m.SpendKey))
	}
	return out
}

// Config configures the tool. Zero fields take their defaults.
type Config struct {
	// VoiceFunc returns the session's current voice profile, resolved;
	// it is called at every call. Nil makes every call an error.
	VoiceFunc func() (Voice, error)
	// SendFunc runs choir.send.file (a host tool) with callID and input,
	// for send: true; nil refuses send.
	SendFunc func(ctx context.Context, callID string, input json.RawMessage) (tool.Result, error)
	// UsageFunc, when set, is told what each call consumed, once its
	// requests are done, even when a later part failed.
	UsageFunc func(ctx context.Context, u Usage)
	// HTTPClient makes the requests; http.DefaultClient by default.
	HTTPClient *http.Client
	// Logger receives a line per failed call; slog.Default() by default.
	Logger *slog.Logger
	// MaxRetries bounds the retries of one request after a 429 (default
	// 3); MaxWait is the longest wait for one (default 30 s).
	MaxRetries int
	MaxWait    time.Duration
	// SleepFunc waits d or until ctx ends; tests replace it.
	SleepFunc func(ctx context.Context, d time.Duration) error
	// PartChars, when positive, lowers the characters of one request
	// below the model's limit.
	PartChars int
}

func (c Config) withDefaults() Config {
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxRetries <= 0 {
		c.MaxRetries = 3
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 30 * time.Second
	}
	if c.SleepFunc == nil {
		c.SleepFunc = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return c
}

// Tools returns choir.tts.speak configured by cfg.
func Tools(cfg Config) []tool.Tool { return []tool.Tool{&speak{cfg: cfg.withDefaults()}} }

type speak struct{ cfg Config }

func (s *speak) Spec() tool.Spec { return catalog.TTSSpeak() }

type input struct {
	Text    string `json:"text"`
	Send    bool   `json:"send"`
	Caption string `json:"caption"`
	Name    string `json:"name"`
}

// output is the tool's answer.
type output struct {
	File            string          `json:"file"`
	Bytes           int             `json:"bytes"`
	DurationSeconds float64         `json:"duration_seconds"`
	Parts           int             `json:"parts"`
	Characters      int             `json:"characters"`
	VoiceProfile    string          `json:"voice_profile"`
	VoiceID         string          `json:"voice_id"`
	ModelID         string          `json:"model_id"`
	Format          string          `json:"format"`
	ProfileFormat   string          `json:"profile_format,omitempty"`
	Sent            json.RawMessage `json:"sent,omitempty"`
	Note            string          `json:"note,omitempty"`
}

// Execute speaks the text. Every failure the model can act on is a result
// with status error saying what to do, and a log line.
func (s *speak) Execute(ctx context.Context, env tool.Env, raw json.RawMessage) (res tool.Result, err error) {
	// What the provider spoke is spent, whatever happens next: the result
	// carries it for the usage accounting (tool.Result.Usage).
	var spent Usage
	defer func() {
		if spent.Characters > 0 && err == nil {
			res.Usage = append(res.Usage, spent.Records()...)
		}
	}()
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		return tool.ErrorResult("decode input: %v", err), nil
	}
	fail := func(v *Voice, format string, args ...any) (tool.Result, error) {
		msg := fmt.Sprintf(format, args...)
		attrs := []any{slog.String("error", msg)}
		if v != nil {
			attrs = append(attrs, slog.String("voice_profile", v.Profile), slog.String("tts", v.TTS))
		}
		s.cfg.Logger.WarnContext(ctx, "tts call failed", attrs...)
		return tool.ErrorResult("%s", msg), nil
	}
	if s.cfg.VoiceFunc == nil {
		return fail(nil, "text-to-speech is not set up in this agent")
	}
	voice, err := s.cfg.VoiceFunc()
	if err != nil {
		return fail(nil, "%v", err)
	}
	key, ok := env.Secret(tool.SecretTTS)
	if (!ok || key == "") && !voice.Gateway {
		return fail(&voice, "the API key of TTS provider %q is not available to this session: name it in tts.%s.secret in "+
			"config.json and set it (choirctl secret set <name>)", voice.TTS, voice.TTS)
	}
	if in.Send && s.cfg.SendFunc == nil {
		return fail(&voice, "send is not available here: call without send, then choir.send.file")
	}
	limit := partLimit(voice.ModelID)
	if s.cfg.PartChars > 0 {
		limit = min(limit, s.cfg.PartChars)
	}
	parts := splitText(in.Text, limit)
	if len(parts) == 0 {
		return fail(&voice, "the text is blank: give words to speak")
	}
	format := opusFormat(voice.OutputFormat)
	audio, usage, err := s.synthesize(ctx, &elevenLabs{cfg: s.cfg, key: key, voice: voice}, parts, format)
	spent = usage
	if usage.Characters > 0 && s.cfg.UsageFunc != nil {
		s.cfg.UsageFunc(ctx, usage)
	}
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, ctx.Err()
		}
		return fail(&voice, "%s", explain(err, voice))
	}
	stem := in.Name
	if stem == "" {
		stem = "voice-" + time.Now().UTC().Format("20060102-150405") + "-" + randomHex(3)
	}
	file := path.Join(SendDir, stem+".ogg")
	if err := writeFile(env.Workspace, file, audio); err != nil {
		return fail(&voice, "write %s: %v", file, err)
	}
	out := output{File: file, Bytes: len(audio), DurationSeconds: opusDuration(audio), Parts: len(parts),
		Characters: usage.Characters, VoiceProfile: voice.Profile, VoiceID: voice.VoiceID, ModelID: voice.ModelID, Format: format}
	if format != voice.OutputFormat {
		out.ProfileFormat = voice.OutputFormat
	}
	if !in.Send {
		out.Note = "send it with choir.send.file {\"path\": \"" + stem + ".ogg\"}"
		return tool.SuccessResult(fmt.Sprintf("spoke %d characters into %s", usage.Characters, file), out), nil
	}
	sendIn, _ := json.Marshal(map[string]string{"path": stem + ".ogg", "kind": "voice", "caption": in.Caption})
	// The outbox sends a call id once: a name spoken again is a new
	// message, so the id is the call's own.
	r, err := s.cfg.SendFunc(ctx, "tts-"+stem+"-"+randomHex(4), sendIn)
	if err == nil && r.Status != tool.StatusSuccess {
		err = fmt.Errorf("%s %s", r.Summary, r.Output)
	}
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, ctx.Err()
		}
		return fail(&voice, "the voice message is in %s, but sending it failed: %v; send it with choir.send.file", file, err)
	}
	out.Sent = r.Output
	return tool.SuccessResult(fmt.Sprintf("spoke %d characters and sent %s as a voice message", usage.Characters, file), out), nil
}

// synthesize speaks every part and joins the audio; usage counts the
// characters of the parts the provider answered.
func (s *speak) synthesize(ctx context.Context, p *elevenLabs, parts []string, format string) ([]byte, Usage, error) {
	v := p.voice
	u := Usage{Profile: v.Profile, TTS: v.TTS, Provider: v.Provider, ModelID: v.ModelID, VoiceID: v.VoiceID,
		PricePer1KCharacters: v.PricePer1KCharacters}
	audio := make([][]byte, 0, len(parts))
	for i, part := range parts {
		req := speechRequest{Text: part}
		if i > 0 {
			req.PreviousText = parts[i-1]
		}
		if i+1 < len(parts) {
			req.NextText = parts[i+1]
		}
		b, spendKey, err := p.speak(ctx, req, format)
		if err != nil {
			if len(parts) > 1 {
				err = fmt.Errorf("part %d of %d: %w", i+1, len(parts), err)
			}
			return nil, u, err
		}
		n := utf8.RuneCountInString(part)
		u.Characters += n
		u.Requests++
		if spendKey != "" {
			u.Metered = append(u.Metered, MeteredRequest{SpendKey: spendKey, Characters: n})
		}
		audio = append(audio, b)
	}
	joined, err := joinOpus(audio)
	if err != nil {
		return nil, u, fmt.Errorf("the provider's audio (%s): %w", format, err)
	}
	return joined, u, nil
}

// explain turns an error into what the model should be told.
func explain(err error, v Voice) string {
	var pe *ProviderError
	switch {
	case errors.As(err, &pe) && pe.Status == http.StatusUnauthorized:
		return fmt.Sprintf("the TTS provider %q refused its API key (%s: %s): the operator must set the key again (choirctl secret set %s)",
			v.TTS, pe.Code, pe.Message, v.Secret)
	case errors.As(err, &pe) && pe.Status == http.StatusTooManyRequests:
		return fmt.Sprintf("the TTS provider %q is rate limiting (%s: %s); try again in %s", v.TTS, pe.Code, pe.Message,
			max(pe.RetryAfter, time.Second).Round(time.Second))
	case errors.As(err, &pe):
		return fmt.Sprintf("the TTS provider %q failed: %v (voice profile %q, voice %s, model %s)", v.TTS, err, v.Profile, v.VoiceID, v.ModelID)
	case errors.Is(err, ErrNotOggOpus):
		return fmt.Sprintf("the TTS provider %q did not return OGG Opus audio (%v): its plan may not offer Opus output", v.TTS, err)
	case errors.Is(err, ErrUnreachable):
		return err.Error() + "; try again later"
	}
	return err.Error()
}

// writeFile writes data to rel in the workspace through an os.Root, via a
// temporary file renamed into place, so that a sender never sees half a
// file.
func writeFile(ws, rel string, data []byte) error {
	if ws == "" {
		return errors.New("no workspace")
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return err
	}
	tmp := rel + ".tmp-" + randomHex(4)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		root.Remove(tmp) //nolint:errcheck
		return err
	}
	if err := f.Close(); err != nil {
		root.Remove(tmp) //nolint:errcheck
		return err
	}
	if err := root.Rename(tmp, rel); err != nil {
		root.Remove(tmp) //nolint:errcheck
		return err
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) //nolint:errcheck // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
