package llm

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MaxWireToolNameLen is the longest function name OpenAI-compatible APIs
// accept.
const MaxWireToolNameLen = 64

// ErrInvalidToolName is returned for a name that is not canonical, whose wire
// form would be too long, or that is not the wire form of any canonical name.
var ErrInvalidToolName = errors.New("invalid tool name")

var (
	canonicalToolNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)
	wireToolNameRE      = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
)

// ValidToolName reports whether name is a canonical tool name
// (`choir.fs.read`: dot-separated segments of lowercase letters, digits and
// underscores, each starting with a letter, at least two segments) whose wire
// form fits the API's 64-character limit. The tool registry calls it at
// start-up so that a bad name fails there, not at the first model call.
func ValidToolName(name string) bool {
	_, err := SanitizeToolName(name)
	return err == nil
}

// SanitizeToolName maps a canonical tool name to the name sent to the API,
// which accepts only `^[a-zA-Z0-9_-]{1,64}$`:
//
//   - a dot becomes a double underscore: choir.fs.read -> choir__fs__read;
//   - an underscore stays an underscore when neither neighbour is an
//     underscore or a dot: choir.fs.read_file -> choir__fs__read_file;
//   - any other underscore becomes a hyphen: choir.x.a__b -> choir__x__a--b,
//     choir.x_.y -> choir__x-__y;
//   - letters and digits are unchanged.
//
// The mapping is injective: in the output every maximal run of underscores has
// length 1 (an isolated underscore of the input) or 2 (a dot of the input),
// because a dot is always followed by a letter and an underscore next to a
// dot or another underscore has become a hyphen. [CanonicalToolName] undoes it.
// Hyphens and capital letters never occur in canonical names, so neither is
// needed for anything else.
func SanitizeToolName(name string) (string, error) {
	if !canonicalToolNameRE.MatchString(name) {
		return "", fmt.Errorf("%w: %q is not a canonical name like choir.fs.read", ErrInvalidToolName, name)
	}
	var b strings.Builder
	b.Grow(len(name) + strings.Count(name, "."))
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '.':
			b.WriteString("__")
		case '_':
			if (i > 0 && underscoreOrDot(name[i-1])) || (i+1 < len(name) && underscoreOrDot(name[i+1])) {
				b.WriteByte('-')
			} else {
				b.WriteByte('_')
			}
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() > MaxWireToolNameLen {
		return "", fmt.Errorf("%w: %q is %d characters on the wire, the API allows %d", ErrInvalidToolName, name, b.Len(), MaxWireToolNameLen)
	}
	return b.String(), nil
}

func underscoreOrDot(c byte) bool { return c == '_' || c == '.' }

// CanonicalToolName is the inverse of [SanitizeToolName]: it returns the
// canonical name whose wire form is exactly wire, and an error wrapping
// [ErrInvalidToolName] for any string that is not such a wire form (it never
// guesses: choir__fs__read-file is refused, because choir.fs.read_file goes
// out as choir__fs__read_file).
func CanonicalToolName(wire string) (string, error) {
	fail := func() (string, error) {
		return "", fmt.Errorf("%w: %q is not the wire form of a canonical tool name", ErrInvalidToolName, wire)
	}
	if !wireToolNameRE.MatchString(wire) {
		return fail()
	}
	var b strings.Builder
	b.Grow(len(wire))
	for i := 0; i < len(wire); {
		switch c := wire[i]; c {
		case '-':
			b.WriteByte('_')
			i++
		case '_':
			n := 0
			for i+n < len(wire) && wire[i+n] == '_' {
				n++
			}
			switch n {
			case 1:
				b.WriteByte('_')
			case 2:
				b.WriteByte('.')
			default:
				return fail()
			}
			i += n
		default:
			b.WriteByte(c)
			i++
		}
	}
	name := b.String()
	// Re-encoding rejects every string that decodes but is not exactly the
	// image of its decoding (a hyphen where an underscore belongs, capitals,
	// a non-canonical result), so this function is a true inverse.
	if again, err := SanitizeToolName(name); err != nil || again != wire {
		return fail()
	}
	return name, nil
}
