package tts

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/choirhq/choir/config"
)

// ProviderElevenLabs is the only TTS provider of v1 (spec 21.3).
const ProviderElevenLabs = "elevenlabs"

// Errors of [ResolveVoice]; match them with errors.Is.
var (
	// ErrNoVoiceProfile: the session has no voice profile, or names one
	// the configuration lacks.
	ErrNoVoiceProfile = errors.New("no voice profile")
	// ErrUnknownProvider: the voice profile's TTS provider is missing
	// from the configuration or is not one this tool speaks.
	ErrUnknownProvider = errors.New("unknown TTS provider")
)

// Voice is a voice profile resolved against its TTS provider: everything
// one call needs except the API key, of which it holds only the name.
type Voice struct {
	// Profile names the voice profile, TTS its provider entry in
	// config.json, Provider that entry's provider ("elevenlabs").
	Profile, TTS, Provider string
	// Endpoint is the provider's API root, e.g.
	// https://api.elevenlabs.io/v1; ModelID its TTS model.
	Endpoint, ModelID string
	// Secret names the provider's API key (never its value).
	Secret string
	// VoiceID, OutputFormat and Settings are the profile's.
	VoiceID, OutputFormat string
	Settings              config.VoiceSettings
	// PricePer1KCharacters is the provider's price, zero when unpriced.
	PricePer1KCharacters float64
	// Gateway says Endpoint is the provider's service route on choird's
	// egress gateway, which adds the key (the tool needs none then) and
	// meters each request under the spend key the tool sends.
	Gateway bool
}

// ResolveVoice resolves the voice profile named profile (the session's
// current one: its /voice override, else its binding) through the dynamic
// configuration's profiles and providers.
func ResolveVoice(profile string, profiles map[string]config.VoiceProfile, providers map[string]config.TTS) (Voice, error) {
	if profile == "" {
		return Voice{}, fmt.Errorf("%w: the session has none; set defaults.voice_profile in config.json or switch with /voice <profile>", ErrNoVoiceProfile)
	}
	vp, ok := profiles[profile]
	if !ok {
		return Voice{}, fmt.Errorf("%w: voice profile %q is not configured (voice profiles: %s); switch with /voice <profile>",
			ErrNoVoiceProfile, profile, names(profiles))
	}
	t, ok := providers[vp.TTS]
	if !ok {
		return Voice{}, fmt.Errorf("%w: voice profile %q names TTS provider %q, which config.json lacks (tts providers: %s)",
			ErrUnknownProvider, profile, vp.TTS, names(providers))
	}
	if !strings.EqualFold(t.Provider, ProviderElevenLabs) {
		return Voice{}, fmt.Errorf("%w: voice profile %q uses tts %q of provider %q; choir.tts.speak speaks only %q: "+
			"switch to a voice profile of an elevenlabs provider with /voice <profile>", ErrUnknownProvider, profile, vp.TTS, t.Provider, ProviderElevenLabs)
	}
	return Voice{Profile: profile, TTS: vp.TTS, Provider: ProviderElevenLabs, Endpoint: t.Endpoint, ModelID: t.ModelID,
		Secret: t.Secret, VoiceID: vp.VoiceID, OutputFormat: vp.OutputFormat, Settings: vp.VoiceSettings,
		PricePer1KCharacters: t.PricePer1KCharacters}, nil
}

func names[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ", ")
}

// opusBitrates are the bit rates of ElevenLabs' opus_48000_* formats.
var opusBitrates = []int{32, 64, 96, 128, 192}

// opusFormat is the output format the tool asks for: the profile's own
// when it is Opus, else the Opus format nearest its bit rate (64 kbit/s
// for PCM and telephony formats). A voice message must be OGG Opus, and
// ElevenLabs encodes it itself, so choir needs no encoder of its own.
func opusFormat(profileFormat string) string {
	if strings.HasPrefix(profileFormat, "opus_48000_") {
		return profileFormat
	}
	kbps := 64
	if f := strings.Split(profileFormat, "_"); len(f) == 3 && f[0] == "mp3" {
		if n, err := strconv.Atoi(f[2]); err == nil {
			kbps = n
		}
	}
	best := opusBitrates[0]
	for _, b := range opusBitrates {
		if abs(b-kbps) < abs(best-kbps) {
			best = b
		}
	}
	return "opus_48000_" + strconv.Itoa(best)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// modelChars are the characters ElevenLabs takes in one request, per
// model (its models page, 2026); a model not listed gets defaultChars.
var modelChars = map[string]int{
	"eleven_v3":              3_000,
	"eleven_multilingual_v2": 10_000,
	"eleven_multilingual_v1": 10_000,
	"eleven_monolingual_v1":  10_000,
	"eleven_flash_v2":        30_000,
	"eleven_turbo_v2":        30_000,
	"eleven_flash_v2_5":      40_000,
	"eleven_turbo_v2_5":      40_000,
}

const defaultChars = 3_000

func partLimit(model string) int {
	if n, ok := modelChars[model]; ok {
		return n
	}
	return defaultChars
}
