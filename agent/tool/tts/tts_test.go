package tts_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/rpc/usage"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/meter"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"github.com/choirhq/choir/agent/tool/tts"
	"github.com/choirhq/choir/agent/tool/tts/ttstest"
	"github.com/choirhq/choir/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testBundle is the tool over a fresh workspace, a fake ElevenLabs, and a
// dynamic configuration the test changes as /voice does.
type testBundle struct {
	*tooltest.Bundle
	fake     *ttstest.Server
	log      *logbuf.Buffer
	profile  atomic.Pointer[string] // the session's current voice profile
	profiles map[string]config.VoiceProfile
	tts      map[string]config.TTS
	secrets  map[string]string

	mu    sync.Mutex
	usage []tts.Usage
	slept []time.Duration
	sends []json.RawMessage
}

type option func(*tts.Config)

func setup(t *testing.T, opts ...option) *testBundle {
	t.Helper()
	tb := &testBundle{fake: ttstest.NewServer(t), log: &logbuf.Buffer{}}
	tb.tts = map[string]config.TTS{
		"eleven":  {Provider: "elevenlabs", ModelID: "eleven_multilingual_v2", Endpoint: tb.fake.Endpoint(), Secret: "eleven-key"},
		"eleven2": {Provider: "elevenlabs", ModelID: "eleven_flash_v2_5", Endpoint: tb.fake.Endpoint(), Secret: "eleven-key"},
		"acme":    {Provider: "acme-voice", ModelID: "m", Endpoint: tb.fake.Endpoint(), Secret: "acme-key"},
	}
	tb.profiles = map[string]config.VoiceProfile{
		"calm": {TTS: "eleven", VoiceID: "voice-calm", OutputFormat: "opus_48000_64",
			VoiceSettings: config.VoiceSettings{Stability: 0.7, SimilarityBoost: 0.8, Speed: 0.9}},
		"bright": {TTS: "eleven2", VoiceID: "voice-bright", OutputFormat: "mp3_44100_128",
			VoiceSettings: config.VoiceSettings{Stability: 0.3, Style: 0.5, UseSpeakerBoost: true, Speed: 1.2}},
		"odd":      {TTS: "acme", VoiceID: "v", OutputFormat: "opus_48000_64"},
		"dangling": {TTS: "gone", VoiceID: "v", OutputFormat: "opus_48000_64"},
	}
	tb.secrets = map[string]string{"eleven-key": tb.fake.Key, "acme-key": "acme"}
	calm := "calm"
	tb.profile.Store(&calm)
	cfg := tts.Config{
		Logger: slog.New(slog.NewTextHandler(tb.log, nil)),
		// As the agent resolves it: the session's current profile, at
		// each call.
		VoiceFunc: func() (tts.Voice, error) { return tts.ResolveVoice(*tb.profile.Load(), tb.profiles, tb.tts) },
		UsageFunc: func(_ context.Context, u tts.Usage) {
			tb.mu.Lock()
			defer tb.mu.Unlock()
			tb.usage = append(tb.usage, u)
		},
		SleepFunc: func(_ context.Context, d time.Duration) error {
			tb.mu.Lock()
			defer tb.mu.Unlock()
			tb.slept = append(tb.slept, d)
			return nil
		},
		SendFunc: func(_ context.Context, callID string, in json.RawMessage) (tool.Result, error) {
			tb.mu.Lock()
			defer tb.mu.Unlock()
			tb.sends = append(tb.sends, in)
			return tool.SuccessResult("queued", map[string]any{"queued": true, "call_id": callID}), nil
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	tb.Bundle = tooltest.Setup(t, builtin.Config{TTS: cfg})
	// The binding reference resolves like the agent's: the key of the
	// current profile's provider.
	tb.Env.SecretFunc = func(name string) (string, bool) {
		if name != tool.SecretTTS {
			return "", false
		}
		v, err := tts.ResolveVoice(*tb.profile.Load(), tb.profiles, tb.tts)
		if err != nil {
			return "", false
		}
		s, ok := tb.secrets[v.Secret]
		return s, ok
	}
	return tb
}

func (tb *testBundle) use(profile string) { tb.profile.Store(&profile) }

type speakOut struct {
	File            string          `json:"file"`
	Bytes           int             `json:"bytes"`
	DurationSeconds float64         `json:"duration_seconds"`
	Parts           int             `json:"parts"`
	Characters      int             `json:"characters"`
	VoiceProfile    string          `json:"voice_profile"`
	VoiceID         string          `json:"voice_id"`
	Format          string          `json:"format"`
	ProfileFormat   string          `json:"profile_format"`
	Sent            json.RawMessage `json:"sent"`
}

func mustSpeak(t *testing.T, tb *testBundle, input string) speakOut {
	t.Helper()
	r := tb.MustCall(t, tts.Name, input)
	if r.Status != tool.StatusSuccess {
		t.Fatalf("speak: %s %s", r.Status, r.Summary)
	}
	out := tooltest.Output[speakOut](t, r)
	// What was spoken is counted, for the usage accounting.
	if len(r.Usage) != 1 || r.Usage[0].Kind != usage.KindTTS || r.Usage[0].Unit != usage.UnitCharacters ||
		r.Usage[0].Units != int64(out.Characters) || r.Usage[0].Units == 0 {
		t.Errorf("usage %+v, want the %d characters spoken", r.Usage, out.Characters)
	}
	return out
}

// oggPage is a page as this test reads it, independently of the tool.
type oggPage struct {
	flags   byte
	granule int64
	serial  uint32
	body    []byte
}

// readOgg checks that data is one Ogg Opus logical stream, as Telegram
// wants a voice message: pages with the OggS capture pattern, the first a
// BOS page holding exactly the OpusHead packet (version 1), the last the
// only EOS page, one serial number throughout. It returns the pages.
func readOgg(t *testing.T, data []byte) []oggPage {
	t.Helper()
	var pages []oggPage
	for off := 0; off < len(data); {
		h := data[off:]
		if len(h) < 27 || string(h[:4]) != "OggS" {
			t.Fatalf("no OggS page at offset %d", off)
		}
		n := int(h[26])
		size := 0
		for _, s := range h[27 : 27+n] {
			size += int(s)
		}
		pages = append(pages, oggPage{flags: h[5], granule: int64(binary.LittleEndian.Uint64(h[6:14])),
			serial: binary.LittleEndian.Uint32(h[14:18]), body: h[27+n : 27+n+size]})
		off += 27 + n + size
	}
	first, last := pages[0], pages[len(pages)-1]
	if first.flags&0x02 == 0 || !bytes.HasPrefix(first.body, []byte("OpusHead")) || first.body[8] != 1 || len(first.body) != 19 {
		t.Fatalf("first page: flags %x, body %q: want BOS and an OpusHead of version 1", first.flags, first.body)
	}
	if !bytes.HasPrefix(pages[1].body, []byte("OpusTags")) {
		t.Fatalf("second page does not start with OpusTags")
	}
	for i, p := range pages {
		if p.serial != first.serial {
			t.Fatalf("page %d has serial %x, the first %x: several logical streams", i, p.serial, first.serial)
		}
		if (p.flags&0x04 != 0) != (i == len(pages)-1) || (i > 0 && p.flags&0x02 != 0) {
			t.Fatalf("page %d flags %x: want BOS only first and EOS only last", i, p.flags)
		}
	}
	_ = last
	return pages
}

// opusinfoLength decodes file with opus-tools' opusinfo, which checks every
// page's CRC and the stream's continuity, and returns the playback length.
// Outside CI, without opus-tools, it returns -1.
func opusinfoLength(t *testing.T, file string) float64 {
	t.Helper()
	bin, err := exec.LookPath("opusinfo")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("opusinfo is missing: run scripts/testdeps.sh (installs opus-tools)")
		}
		t.Log("opusinfo not installed (scripts/testdeps.sh installs it): stream not decoded")
		return -1
	}
	out, err := exec.Command(bin, file).CombinedOutput()
	if err != nil {
		t.Fatalf("opusinfo: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("WARNING")) || bytes.Contains(out, []byte("ERROR")) {
		t.Fatalf("opusinfo complains:\n%s", out)
	}
	m := regexp.MustCompile(`Playback length: (\d+)m:([\d.]+)s`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("opusinfo: no playback length in\n%s", out)
	}
	min, _ := strconv.Atoi(string(m[1]))
	sec, _ := strconv.ParseFloat(string(m[2]), 64)
	return float64(min)*60 + sec
}

func TestSpeakWritesOggOpusWithTheCurrentVoiceProfile(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	d, _ := tb.Reg.Get(tts.Name)
	locks, err := d.Locks(tb.WS, json.RawMessage(`{"text": "hi"}`))
	if err != nil || len(locks) != 1 || locks[0].String() != "choirtmp:X" {
		t.Fatalf("locks %v %v, want choirtmp:X", locks, err)
	}

	out := mustSpeak(t, tb, `{"text": "Good morning. Your flight leaves at nine.", "name": "morning"}`)
	if out.File != ".choirtmp/send/morning.ogg" || out.VoiceProfile != "calm" || out.Format != "opus_48000_64" || out.Parts != 1 {
		t.Errorf("output %+v", out)
	}
	data, err := os.ReadFile(filepath.Join(tb.WS, out.File))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, ttstest.Tone()) || out.Bytes != len(data) {
		t.Errorf("a one-part answer is written as the provider sent it")
	}
	readOgg(t, data)
	if out.DurationSeconds < 0.49 || out.DurationSeconds > 0.51 {
		t.Errorf("duration %v, want 0.5", out.DurationSeconds)
	}
	c := tb.fake.Calls()[0]
	if c.VoiceID != "voice-calm" || c.Format != "opus_48000_64" || c.Body.ModelID != "eleven_multilingual_v2" ||
		c.Body.VoiceSettings["stability"] != 0.7 || c.Body.VoiceSettings["similarity_boost"] != 0.8 || c.Body.VoiceSettings["speed"] != 0.9 {
		t.Errorf("request %+v", c)
	}

	// /voice bright: the next call speaks with it, its provider's model,
	// and Opus at the bit rate nearest the profile's mp3 format.
	tb.use("bright")
	out = mustSpeak(t, tb, `{"text": "And now brightly!"}`)
	c = tb.fake.Calls()[1]
	if c.VoiceID != "voice-bright" || c.Body.ModelID != "eleven_flash_v2_5" || c.Format != "opus_48000_128" ||
		c.Body.VoiceSettings["style"] != 0.5 || c.Body.VoiceSettings["use_speaker_boost"] != true || c.Body.VoiceSettings["speed"] != 1.2 {
		t.Errorf("after /voice: request %+v", c)
	}
	if out.VoiceProfile != "bright" || out.ProfileFormat != "mp3_44100_128" || !strings.HasPrefix(out.File, ".choirtmp/send/voice-") {
		t.Errorf("after /voice: output %+v", out)
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.usage) != 2 || tb.usage[0].Characters != 41 || tb.usage[1].Characters != 17 || tb.usage[1].Profile != "bright" ||
		tb.usage[1].Requests != 1 || tb.usage[1].Provider != "elevenlabs" {
		t.Errorf("usage %+v", tb.usage)
	}
}

func TestLongTextIsSplitAtSentencesAndJoinedIntoOneStream(t *testing.T) {
	t.Parallel()
	tb := setup(t, func(c *tts.Config) { c.PartChars = 60 })
	sentences := []string{
		"The first sentence is here.", "A second one follows it!", "Does a third fit?",
		"Yes, and a fourth.", "The fifth sentence closes the text.",
	}
	text := strings.Join(sentences, " ")
	out := mustSpeak(t, tb, `{"text": "`+text+`", "name": "long"}`)
	calls := tb.fake.Calls()
	if out.Parts != len(calls) || len(calls) < 3 {
		t.Fatalf("%d parts, %d requests", out.Parts, len(calls))
	}
	var rejoined []string
	for i, c := range calls {
		if n := len([]rune(c.Body.Text)); n > 60 {
			t.Errorf("part %d has %d characters, over the limit", i, n)
		}
		if !strings.ContainsAny(c.Body.Text[len(c.Body.Text)-1:], ".!?") {
			t.Errorf("part %d does not end at a sentence: %q", i, c.Body.Text)
		}
		if i > 0 && c.Body.PreviousText != calls[i-1].Body.Text || i+1 < len(calls) && c.Body.NextText != calls[i+1].Body.Text {
			t.Errorf("part %d lacks its neighbours as context", i)
		}
		rejoined = append(rejoined, c.Body.Text)
	}
	if strings.Join(rejoined, " ") != text {
		t.Errorf("parts %q do not make up the text", rejoined)
	}
	file := filepath.Join(tb.WS, out.File)
	data, _ := os.ReadFile(file)
	pages := readOgg(t, data)
	want := ttstest.ToneSeconds * float64(len(calls))
	if got := float64(pages[len(pages)-1].granule-312) / 48000; got < want-0.05 || got > want+0.05 {
		t.Errorf("final granule says %.3f s, want about %.1f s", got, want)
	}
	if got := opusinfoLength(t, file); got >= 0 && (got < want-0.05 || got > want+0.05) {
		t.Errorf("opusinfo: %.3f s, want about %.1f s", got, want)
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.usage) != 1 || tb.usage[0].Characters != len(text)-(len(calls)-1) || tb.usage[0].Requests != len(calls) {
		t.Errorf("usage %+v for %d characters in %d parts", tb.usage, len(text), len(calls))
	}
}

func TestSendHandsTheVoiceMessageToSendFile(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	out := mustSpeak(t, tb, `{"text": "Sent at once.", "name": "now", "send": true, "caption": "for you"}`)
	if len(out.Sent) == 0 {
		t.Errorf("no send result in %+v", out)
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.sends) != 1 || string(tb.sends[0]) != `{"caption":"for you","kind":"voice","path":"now.ogg"}` {
		t.Errorf("choir.send.file inputs %s", tb.sends)
	}
}

func TestRateLimitIsWaitedOut(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.fake.RateLimit(1)
	mustSpeak(t, tb, `{"text": "After a pause."}`)
	tb.mu.Lock()
	if len(tb.slept) != 1 || tb.slept[0] != 3*time.Second {
		t.Errorf("waited %v, want 3s (Retry-After: 3)", tb.slept)
	}
	tb.mu.Unlock()
}

func TestBadInputGetsAStructuredError(t *testing.T) {
	t.Parallel()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String() + "/v1"
	dead.Close()

	tests := []struct {
		name    string
		prepare func(tb *testBundle)
		want    string
	}{
		{"MissingKey", func(tb *testBundle) { delete(tb.secrets, "eleven-key") }, "API key of TTS provider \"eleven\" is not available"},
		{"InvalidKey", func(tb *testBundle) { tb.secrets["eleven-key"] = "wrong" }, "refused its API key (invalid_api_key"},
		{"RateLimited", func(tb *testBundle) { tb.fake.RateLimit(100) }, "is rate limiting (too_many_concurrent_requests"},
		{"ProviderError", func(tb *testBundle) { tb.fake.Fail("voice_not_found") }, "failed: TTS provider answered 400 voice_not_found"},
		{"NotOpus", func(tb *testBundle) { tb.fake.AnswerMP3() }, "did not return OGG Opus audio"},
		{"Unreachable", func(tb *testBundle) {
			p := tb.tts["eleven"]
			p.Endpoint = deadURL
			tb.tts["eleven"] = p
		}, "TTS provider unreachable"},
		{"UnknownProvider", func(tb *testBundle) { tb.use("odd") }, `uses tts "acme" of provider "acme-voice"; choir.tts.speak speaks only "elevenlabs"`},
		{"MissingProvider", func(tb *testBundle) { tb.use("dangling") }, `names TTS provider "gone", which config.json lacks`},
		{"UnknownProfile", func(tb *testBundle) { tb.use("nope") }, `voice profile "nope" is not configured`},
		{"NoProfile", func(tb *testBundle) { tb.use("") }, "no voice profile: the session has none"},
		{"BlankText", nil, "the text is blank"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			if tt.prepare != nil {
				tt.prepare(tb)
			}
			text := "Hello there."
			if tt.name == "BlankText" {
				text = " \n "
			}
			r := tb.MustCall(t, tts.Name, `{"text": "`+strings.ReplaceAll(text, "\n", `\n`)+`"}`)
			if r.Status != tool.StatusError || !strings.Contains(r.Summary, tt.want) {
				t.Errorf("got %s %q, want an error containing %q", r.Status, r.Summary, tt.want)
			}
			if !strings.Contains(tb.log.String(), "tts call failed") {
				t.Errorf("no log line:\n%s", tb.log)
			}
			if ents, _ := os.ReadDir(filepath.Join(tb.WS, tts.SendDir)); len(ents) != 0 {
				t.Errorf("a failed call left %d files", len(ents))
			}
		})
	}
}

// TestRealElevenLabs speaks through the real API when
// CHOIR_TEST_ELEVENLABS_KEY holds a key (never in CI); the voice is
// CHOIR_TEST_ELEVENLABS_VOICE or ElevenLabs' stock "Rachel".
func TestRealElevenLabs(t *testing.T) {
	t.Parallel()
	key := os.Getenv("CHOIR_TEST_ELEVENLABS_KEY")
	if key == "" || os.Getenv("CI") != "" {
		t.Skip("skipped: set CHOIR_TEST_ELEVENLABS_KEY (outside CI) to speak through the real ElevenLabs API")
	}
	voice := os.Getenv("CHOIR_TEST_ELEVENLABS_VOICE")
	if voice == "" {
		voice = "21m00Tcm4TlvDq8ikWAM"
	}
	v := tts.Voice{Profile: "real", TTS: "elevenlabs", Provider: "elevenlabs", Endpoint: "https://api.elevenlabs.io/v1",
		ModelID: "eleven_multilingual_v2", VoiceID: voice, OutputFormat: "opus_48000_32",
		Settings: config.VoiceSettings{Stability: 0.5, SimilarityBoost: 0.75, Speed: 1}}
	b := tooltest.Setup(t, builtin.Config{TTS: tts.Config{VoiceFunc: func() (tts.Voice, error) { return v, nil }}})
	b.Env.SecretFunc = func(name string) (string, bool) { return key, name == tool.SecretTTS }
	r := b.MustCall(t, tts.Name, `{"text": "Hello from Choir. This is a test.", "name": "real"}`)
	if r.Status != tool.StatusSuccess {
		t.Fatalf("%s", r.Summary)
	}
	data, _ := os.ReadFile(filepath.Join(b.WS, tts.SendDir, "real.ogg"))
	readOgg(t, data)
}

// TestPricedSpeechIsCountedAgainstTheCaps: with a price configured for
// its provider (tts.<name>.price_per_1k_characters), what the tool spoke
// is recorded with its cost, and a meter that counts it refuses the next
// model call once the session's cost cap is spent.
func TestPricedSpeechIsCountedAgainstTheCaps(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	e := tb.tts["eleven"]
	e.PricePer1KCharacters = 0.3
	tb.tts["eleven"] = e
	r := tb.MustCall(t, tts.Name, `{"text": "Good morning. Your flight leaves at nine."}`)
	if r.Status != tool.StatusSuccess || len(r.Usage) != 1 {
		t.Fatalf("speak: %s %s, usage %+v", r.Status, r.Summary, r.Usage)
	}
	if u := r.Usage[0]; u.Units != 41 || math.Abs(u.CostUSD-0.0123) > 1e-12 || u.CostSource != usage.CostPrices {
		t.Fatalf("usage %+v, want 41 characters costing $0.0123 at the configured prices", u)
	}
	m := meter.New(meter.Config{AgentID: "assistant"})
	m.SetCaps(config.Budgets{Caps: config.Caps{SessionCostUSD: 0.01}})
	m.Record("edge", r.Usage)
	srv := llmtest.NewServer(t)
	_, err := (&llm.Client{Gate: m}).Complete(context.Background(), llm.Request{Model: srv.Model(), Messages: []llm.Message{llm.UserMessage("hi")}})
	var ce *meter.CapError
	if !errors.As(err, &ce) || ce.Field != "session_cost_usd" || len(srv.Requests()) != 0 {
		t.Errorf("after $0.0123 of speech under a $0.01 cap: err = %v, %d requests; want the session cost cap, none sent", err, len(srv.Requests()))
	}
}
