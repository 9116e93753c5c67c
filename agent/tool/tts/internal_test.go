package tts

import (
	"errors"
	"os"
	"slices"
	"testing"
	"unicode/utf8"
)

func TestSplitText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		text  string
		limit int
		want  []string
	}{
		{"FitsWhole", "One. Two.", 100, []string{"One. Two."}},
		{"AtSentences", "One two. Three four! Five six?", 12, []string{"One two.", "Three four!", "Five six?"}},
		{"PacksSentences", "A. B. C. D.", 5, []string{"A. B.", "C. D."}},
		{"ClosingQuote", `He said "go." Then left.`, 14, []string{`He said "go."`, "Then left."}},
		{"NoSplitInsideNumber", "Pi is 3.14 today. Yes.", 18, []string{"Pi is 3.14 today.", "Yes."}},
		{"LineBreaks", "Title\nBody text here", 12, []string{"Title", "Body text", "here"}},
		{"LongSentenceBetweenWords", "aaa bbb ccc ddd", 8, []string{"aaa bbb", "ccc ddd"}},
		{"LongWord", "abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"FullWidth", "今日は晴れ。明日は雨。", 6, []string{"今日は晴れ。", "明日は雨。"}},
		{"Blank", " \n\t ", 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := splitText(tt.text, tt.limit)
			if !slices.Equal(got, tt.want) {
				t.Errorf("splitText(%q, %d) = %q, want %q", tt.text, tt.limit, got, tt.want)
			}
			for _, p := range got {
				if utf8.RuneCountInString(p) > tt.limit {
					t.Errorf("part %q over %d", p, tt.limit)
				}
			}
		})
	}
}

func TestOpusFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"opus_48000_96": "opus_48000_96", "mp3_44100_128": "opus_48000_128",
		"mp3_22050_32": "opus_48000_32", "mp3_44100_192": "opus_48000_192", "mp3_24000_48": "opus_48000_32",
		"pcm_16000": "opus_48000_64", "ulaw_8000": "opus_48000_64", "": "opus_48000_64"} {
		if got := opusFormat(in); got != want {
			t.Errorf("opusFormat(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPacketSamples(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p    []byte
		want int
	}{
		{[]byte{0x08 << 3}, 480},           // config 8: SILK wideband, 10 ms
		{[]byte{(1 << 3) | 0}, 960},        // SILK 20 ms
		{[]byte{(31 << 3) | 1}, 1920},      // CELT 20 ms, two frames
		{[]byte{(16 << 3) | 3, 0x05}, 600}, // CELT 2.5 ms, five frames
		{[]byte{(13 << 3) | 0}, 960},       // hybrid 20 ms
	} {
		if got := packetSamples(tt.p); got != tt.want {
			t.Errorf("packetSamples(%x) = %d, want %d", tt.p, got, tt.want)
		}
	}
}

// TestParseOggChecksCRC reads the shipped tone (CRCs by libogg) and
// refuses it with one byte changed.
func TestParseOggChecksCRC(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("ttstest/tone.ogg")
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseOpus(b)
	if err != nil || st.preSkip != 312 || len(st.packets) != 26 || st.final != 24312 {
		t.Fatalf("parseOpus: %v", err)
	}
	b[len(b)-1] ^= 0xff
	if _, err := parseOggPages(b); !errors.Is(err, ErrNotOggOpus) {
		t.Errorf("corrupt page: %v", err)
	}
}
