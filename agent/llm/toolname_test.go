package llm_test

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llm"
)

var (
	canonicalRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)
	apiNameRE   = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
)

func TestSanitizeToolName(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name, wire string
	}{
		{"choir.fs.read", "choir__fs__read"},
		{"choir.exec", "choir__exec"},
		{"choir.fs.read_file", "choir__fs__read_file"},
		{"choir.x.a__b", "choir__x__a--b"},
		{"choir.x.a___b", "choir__x__a---b"},
		{"choir.x_.y", "choir__x-__y"},
		{"choir.x__.y", "choir__x--__y"},
		{"choir.x.y_", "choir__x__y_"},
		{"choir.x.y__", "choir__x__y--"},
		{"a_b.c_d", "a_b__c_d"},
		{"a1.b2", "a1__b2"},
		{"a.b.c.d.e", "a__b__c__d__e"},
	}
	for _, tt := range tests {
		wire, err := llm.SanitizeToolName(tt.name)
		if err != nil || wire != tt.wire {
			t.Errorf("SanitizeToolName(%q) = %q, %v; want %q", tt.name, wire, err, tt.wire)
			continue
		}
		back, err := llm.CanonicalToolName(wire)
		if err != nil || back != tt.name {
			t.Errorf("CanonicalToolName(%q) = %q, %v; want %q", wire, back, err, tt.name)
		}
	}
}

func TestSanitizeToolNameRefuses(t *testing.T) {
	t.Parallel()

	for _, name := range []string{
		"", "read", "choir", "choir.", ".fs", "choir..fs", "Choir.fs", "choir.Fs",
		"choir.1fs", "choir._fs", "_choir.fs", "choir.fs-read", "choir.fs read", "choir.fś",
		"choir__fs__read",
	} {
		if _, err := llm.SanitizeToolName(name); !errors.Is(err, llm.ErrInvalidToolName) {
			t.Errorf("SanitizeToolName(%q) error = %v, want ErrInvalidToolName", name, err)
		}
		if llm.ValidToolName(name) {
			t.Errorf("ValidToolName(%q) = true", name)
		}
	}
}

func TestSanitizeToolNameLength(t *testing.T) {
	t.Parallel()

	// A dot takes two characters on the wire: 62 characters with 2 dots make
	// 64, the API's limit; one more is too long.
	fits := "a." + strings.Repeat("b", 58) + ".c"
	if wire, err := llm.SanitizeToolName(fits); err != nil || len(wire) != 64 {
		t.Errorf("SanitizeToolName(%d characters, 2 dots) = %d characters, %v; want 64", len(fits), len(wire), err)
	}
	if _, err := llm.SanitizeToolName(fits + "d"); !errors.Is(err, llm.ErrInvalidToolName) {
		t.Errorf("SanitizeToolName(65 characters on the wire) error = %v, want ErrInvalidToolName", err)
	}
}

func TestCanonicalToolNameRefuses(t *testing.T) {
	t.Parallel()

	for _, wire := range []string{
		"",
		"choir",                 // no dot
		"choir___fs",            // a run of three underscores is never produced
		"choir____fs",           // nor of four
		"choir__fs__read-file",  // read_file goes out with an underscore: no guessing
		"choir__x__a_-b",        // a__b goes out as a--b
		"choir__x__a__",         // a segment cannot be empty
		"__choir__fs",           // nor the first
		"choir__Fs",             // capitals never occur
		"choir.fs.read",         // dots are not wire names
		"choir__1fs",            // segments start with a letter
		"choir__x-__y-",         // x_.y_ goes out as x-__y_
		strings.Repeat("a", 65), // too long
		"choir__fs__read\n",     // trailing newline
		"-choir__fs",            // leading underscore in the canonical name
	} {
		if name, err := llm.CanonicalToolName(wire); !errors.Is(err, llm.ErrInvalidToolName) {
			t.Errorf("CanonicalToolName(%q) = %q, %v; want ErrInvalidToolName", wire, name, err)
		}
	}
}

// TestToolNameMappingExhaustive checks every canonical name of up to 9
// characters over the alphabet {a, 1, _, .}, which holds every shape that
// matters (a letter, a non-letter segment character, the underscore and the
// dot): each maps to a valid API name, maps back, and no two share a wire
// name.
func TestToolNameMappingExhaustive(t *testing.T) {
	t.Parallel()

	const alphabet = "a1_."
	seen := map[string]string{}
	var walk func(prefix string)
	walk = func(prefix string) {
		if canonicalRE.MatchString(prefix) {
			checkRoundTrip(t, prefix)
			wire, _ := llm.SanitizeToolName(prefix)
			if other, dup := seen[wire]; dup {
				t.Fatalf("%q and %q both map to %q", other, prefix, wire)
			}
			seen[wire] = prefix
		}
		if len(prefix) == 9 {
			return
		}
		for _, c := range alphabet {
			// Prune what no suffix can make canonical: a name and each
			// segment start with a letter.
			if c != 'a' && (prefix == "" || strings.HasSuffix(prefix, ".")) {
				continue
			}
			walk(prefix + string(c))
		}
	}
	walk("")
	if len(seen) < 1000 {
		t.Fatalf("only %d canonical names enumerated", len(seen))
	}
}

// TestToolNameMappingRandom checks long random canonical names, with runs of
// underscores next to dots, up to the wire limit.
func TestToolNameMappingRandom(t *testing.T) {
	t.Parallel()

	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		checkRoundTrip(t, randomCanonical(r))
	}
}

func randomCanonical(r *rand.Rand) string {
	var b strings.Builder
	segments := 2 + r.IntN(4)
	for s := range segments {
		if s > 0 {
			b.WriteByte('.')
		}
		b.WriteByte(byte('a' + r.IntN(26)))
		for range r.IntN(12) {
			switch r.IntN(4) {
			case 0, 1:
				b.WriteByte('_')
			case 2:
				b.WriteByte(byte('0' + r.IntN(10)))
			default:
				b.WriteByte(byte('a' + r.IntN(26)))
			}
		}
	}
	return b.String()
}

func checkRoundTrip(t *testing.T, name string) {
	t.Helper()
	wire, err := llm.SanitizeToolName(name)
	if len(name)+strings.Count(name, ".") > llm.MaxWireToolNameLen {
		if !errors.Is(err, llm.ErrInvalidToolName) {
			t.Fatalf("SanitizeToolName(%q) = %q, %v; want too long", name, wire, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("SanitizeToolName(%q): %v", name, err)
	}
	if !apiNameRE.MatchString(wire) {
		t.Fatalf("SanitizeToolName(%q) = %q, not a valid API name", name, wire)
	}
	back, err := llm.CanonicalToolName(wire)
	if err != nil || back != name {
		t.Fatalf("CanonicalToolName(SanitizeToolName(%q) = %q) = %q, %v", name, wire, back, err)
	}
}

// FuzzSanitizeToolName: every canonical name round-trips through a valid
// API name.
func FuzzSanitizeToolName(f *testing.F) {
	for _, s := range []string{"choir.fs.read", "choir.x.a__b", "choir.x_.y", "a_.b__c.d_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if !canonicalRE.MatchString(name) {
			if _, err := llm.SanitizeToolName(name); err == nil {
				t.Fatalf("SanitizeToolName(%q) accepted a non-canonical name", name)
			}
			return
		}
		checkRoundTrip(t, name)
	})
}

// FuzzCanonicalToolName: whatever string comes back from a model, a name
// is returned only if it is canonical and the wire string is exactly its
// sanitised form; so two different wire names never give the same name.
func FuzzCanonicalToolName(f *testing.F) {
	for _, s := range []string{"choir__fs__read", "choir__x__a--b", "choir__x-__y", "choir___fs", "choir__fs__read-file", "a__b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, wire string) {
		name, err := llm.CanonicalToolName(wire)
		if err != nil {
			if !errors.Is(err, llm.ErrInvalidToolName) {
				t.Fatalf("CanonicalToolName(%q) error %v does not wrap ErrInvalidToolName", wire, err)
			}
			return
		}
		if !canonicalRE.MatchString(name) {
			t.Fatalf("CanonicalToolName(%q) = %q, not canonical", wire, name)
		}
		again, err := llm.SanitizeToolName(name)
		if err != nil || again != wire {
			t.Fatalf("SanitizeToolName(CanonicalToolName(%q) = %q) = %q, %v", wire, name, again, err)
		}
	})
}
