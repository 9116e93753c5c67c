package gateway_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/choirhq/choir/daemon/gateway"
)

func units(s string) int { return len(utf16.Encode([]rune(s))) }

func TestSplitText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		text  string
		limit int
		want  []string
	}{
		{"ShortTextIsOneMessage", "hello", 10, []string{"hello"}},
		{"ExactLimitIsOneMessage", "0123456789", 10, []string{"0123456789"}},
		{"EmptyTextIsNoMessage", "", 10, nil},
		{"CutsAtTheLastLineBreak", "one two\nthree four five", 10, []string{"one two", "three four", "five"}},
		{"CutsAtABlankWithoutLineBreak", "alpha beta gamma", 12, []string{"alpha beta", "gamma"}},
		{"PrefersALateBlankToAnEarlyLineBreak", "a\nbcdef ghij klm", 12, []string{"a\nbcdef ghij", "klm"}},
		{"PrefersALateLineBreakToALateBlank", "abc def\nghi jkl", 10, []string{"abc def", "ghi jkl"}},
		{"CutsInsideAWordOnlyWithoutBlanks", "abcdefghijklmnopqrstuvwxy", 10, []string{"abcdefghij", "klmnopqrst", "uvwxy"}},
		{"NeverCutsInsideACharacter", "ééééééééééééé", 5, []string{"ééééé", "ééééé", "ééé"}},
		{"CountsEmojiAsTwoUnits", "😀😀😀😀😀😀", 5, []string{"😀😀", "😀😀", "😀😀"}},
		{"KeepsCJKWhole", "日本語のテキストです", 4, []string{"日本語の", "テキスト", "です"}},
		{"DropsChunksOfOnlyWhiteSpace", "abc\n\n\n\n\n\n\n\n\n\n\n\n\ndef", 5, []string{"abc", "def"}},
		{"DropsTheCarriageReturnOfACRLFCut", "abc def\r\nghi", 9, []string{"abc def", "ghi"}},
		{"KeepsIndentationAfterALineCut", "x = 1\n    y = 2", 10, []string{"x = 1", "    y = 2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := gateway.SplitText(c.text, c.limit)
			if !slices.Equal(got, c.want) {
				t.Errorf("SplitText(%q, %d) = %q, want %q", c.text, c.limit, got, c.want)
			}
		})
	}

	t.Run("TelegramLimit", func(t *testing.T) {
		t.Parallel()
		line := strings.Repeat("x", 99) + "\n" // 100 characters
		text := strings.Repeat(line, 100)      // 10000 characters
		got := gateway.SplitText(text, gateway.MaxMessageLength)
		// 40 lines fit in 4096 characters (4000), 41 do not.
		if len(got) != 3 || got[0] != strings.TrimSuffix(strings.Repeat(line, 40), "\n") {
			t.Errorf("got %d messages of %v characters", len(got), lens(got))
		}
	})

	t.Run("PropertiesHoldForRandomText", func(t *testing.T) {
		t.Parallel()
		rng := rand.New(rand.NewPCG(1, 2))
		alphabet := []rune("abcdefghij é日😀 \n\t.,")
		for i := range 300 {
			n := rng.IntN(3000)
			rs := make([]rune, n)
			for j := range rs {
				rs[j] = alphabet[rng.IntN(len(alphabet))]
			}
			text := string(rs)
			limit := 2 + rng.IntN(200)
			got := gateway.SplitText(text, limit)
			for _, m := range got {
				if units(m) > limit || !utf8.ValidString(m) || strings.TrimSpace(m) == "" {
					t.Fatalf("case %d: message %q breaks the limit %d, UTF-8 or is blank", i, m, limit)
				}
			}
			// Only white space is ever dropped.
			if strip(strings.Join(got, "")) != strip(text) {
				t.Fatalf("case %d: content lost or changed", i)
			}
			if !slices.Equal(got, gateway.SplitText(text, limit)) {
				t.Fatalf("case %d: not deterministic", i)
			}
		}
	})
}

func lens(ss []string) []int {
	var out []int
	for _, s := range ss {
		out = append(out, units(s))
	}
	return out
}

func strip(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
}
