package tts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/choirhq/choir/agent/tool"
)

// maxAudioBytes bounds one answer of the provider; Telegram takes no more
// than 50 MB of a voice message anyway.
const maxAudioBytes = 50 << 20

// ProviderError is an error answer of the TTS provider: the HTTP status,
// ElevenLabs' detail status ("invalid_api_key", "voice_not_found",
// "quota_exceeded", ...) and message, and for a 429 how long to wait.
type ProviderError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("TTS provider answered %d %s: %s", e.Status, e.Code, e.Message)
}

// ErrUnreachable wraps a failure to reach the provider at all.
var ErrUnreachable = errors.New("TTS provider unreachable")

// speechRequest is the body of POST /text-to-speech/{voice_id}.
type speechRequest struct {
	Text          string         `json:"text"`
	ModelID       string         `json:"model_id,omitempty"`
	VoiceSettings map[string]any `json:"voice_settings,omitempty"`
	// PreviousText and NextText are the neighbouring parts of a split
	// text, so that the voice carries on across the joins.
	PreviousText string `json:"previous_text,omitempty"`
	NextText     string `json:"next_text,omitempty"`
}

// elevenLabs calls the ElevenLabs text-to-speech API with one key.
type elevenLabs struct {
	cfg   Config
	key   string
	voice Voice
}

func (e *elevenLabs) settings() map[string]any {
	s := e.voice.Settings
	m := map[string]any{"stability": s.Stability, "similarity_boost": s.SimilarityBoost, "style": s.Style,
		"use_speaker_boost": s.UseSpeakerBoost}
	if s.Speed != 0 {
		m["speed"] = s.Speed
	}
	return m
}

// speak synthesises one part, waiting out a 429 as Retry-After says.
// Through the gateway, spendKey names the answered request in choird's
// spend ledger.
func (e *elevenLabs) speak(ctx context.Context, body speechRequest, format string) (audio []byte, spendKey string, err error) {
	body.ModelID, body.VoiceSettings = e.voice.ModelID, e.settings()
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, "", err
	}
	u := strings.TrimRight(e.voice.Endpoint, "/") + "/text-to-speech/" + url.PathEscape(e.voice.VoiceID) +
		"?" + url.Values{"output_format": {format}}.Encode()
	for attempt := 0; ; attempt++ {
		audio, spendKey, err := e.once(ctx, u, payload)
		var pe *ProviderError
		if !errors.As(err, &pe) || pe.Status != http.StatusTooManyRequests || attempt >= e.cfg.MaxRetries {
			return audio, spendKey, err
		}
		wait := max(pe.RetryAfter, time.Second)
		if wait > e.cfg.MaxWait {
			return nil, "", err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return nil, "", err
		}
		e.cfg.Logger.WarnContext(ctx, "tts provider rate limited; waiting", slog.String("provider", e.voice.TTS),
			slog.Duration("retry_after", wait), slog.Int("attempt", attempt+1))
		if err := e.cfg.SleepFunc(ctx, wait); err != nil {
			return nil, "", err
		}
	}
}

func (e *elevenLabs) once(ctx context.Context, u string, payload []byte) (audio []byte, spendKey string, err error) {
	req, err := http.NewRequestWithContext(ctx, "POST", u, bytes.NewReader(payload))
	if err != nil {
		return nil, "", fmt.Errorf("TTS endpoint %q: %w", e.voice.Endpoint, err)
	}
	if e.voice.Gateway {
		spendKey = tool.LabelServiceCall(ctx, req.Header, Name)
	} else {
		req.Header.Set("xi-api-key", e.key)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "audio/ogg, audio/opus, */*")
	resp, err := e.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		return nil, "", fmt.Errorf("%w at %s: %v", ErrUnreachable, e.voice.Endpoint, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAudioBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("%w at %s: read answer: %v", ErrUnreachable, e.voice.Endpoint, err)
	}
	if resp.StatusCode/100 != 2 {
		pe := &ProviderError{Status: resp.StatusCode, Code: http.StatusText(resp.StatusCode)}
		pe.Code, pe.Message = detail(b, pe.Code)
		if resp.StatusCode == http.StatusTooManyRequests {
			if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s >= 0 {
				pe.RetryAfter = time.Duration(s) * time.Second
			}
		}
		return nil, "", pe
	}
	if len(b) > maxAudioBytes {
		return nil, "", fmt.Errorf("the provider's audio is larger than %d MB: speak a shorter text", maxAudioBytes>>20)
	}
	return b, spendKey, nil
}

// detail reads ElevenLabs' error body: {"detail": {"status", "message"}},
// {"detail": [{"msg", "loc"}]} (validation) or {"detail": "text"}.
func detail(b []byte, code string) (string, string) {
	var env struct {
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &env) != nil || len(env.Detail) == 0 {
		return code, strings.TrimSpace(string(b[:min(len(b), 300)]))
	}
	var obj struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	if json.Unmarshal(env.Detail, &obj) == nil && (obj.Status != "" || obj.Message != "") {
		return cmpOr(obj.Status, code), obj.Message
	}
	var list []struct {
		Msg string `json:"msg"`
		Loc []any  `json:"loc"`
	}
	if json.Unmarshal(env.Detail, &list) == nil && len(list) > 0 {
		msgs := make([]string, len(list))
		for i, l := range list {
			msgs[i] = fmt.Sprintf("%v: %s", l.Loc, l.Msg)
		}
		return "validation_error", strings.Join(msgs, "; ")
	}
	var s string
	if json.Unmarshal(env.Detail, &s) == nil {
		return code, s
	}
	return code, string(env.Detail)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
