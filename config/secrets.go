package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/choirhq/choir/strictjson"
)

// redacted stands in for every secret value in output.
const redacted = "REDACTED"

// Secrets maps secret names to values: the content of secrets.json, a flat
// JSON object of strings.
//
// Formatting a Secrets with fmt, logging it with slog or marshaling it with
// encoding/json shows the names and hides the values. Code that must send
// the values somewhere says so by converting: map[string]string(s).
type Secrets map[string]string

// ParseSecrets parses secrets.json strictly: an object whose values are all
// strings, with no duplicate names.
func ParseSecrets(data []byte) (Secrets, error) {
	var m map[string]string
	if err := strictjson.Decode(data, &m, strictjson.Limits{}); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]string{}
	}
	return Secrets(m), nil
}

// Names returns the secret names, sorted.
func (s Secrets) Names() []string {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// String lists the names with the values redacted, like fmt prints a map.
func (s Secrets) String() string {
	var b strings.Builder
	b.WriteString("map[")
	for i, name := range s.Names() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(name)
		b.WriteString(":" + redacted)
	}
	b.WriteString("]")
	return b.String()
}

// GoString is String for %#v.
func (s Secrets) GoString() string {
	var b strings.Builder
	b.WriteString("config.Secrets{")
	for i, name := range s.Names() {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q:%q", name, redacted)
	}
	b.WriteString("}")
	return b.String()
}

// Format redacts under every verb: without it, fmt would print the values
// of the underlying map for verbs such as %d or %x.
func (s Secrets) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, s.GoString())
		return
	}
	fmt.Fprint(f, s.String())
}

// LogValue implements slog.LogValuer: a group of names with redacted values.
func (s Secrets) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, len(s))
	for _, name := range s.Names() {
		attrs = append(attrs, slog.String(name, redacted))
	}
	return slog.GroupValue(attrs...)
}

// MarshalJSON renders the names with redacted values. To write real values,
// as WriteFiles does, marshal map[string]string(s).
func (s Secrets) MarshalJSON() ([]byte, error) {
	m := make(map[string]string, len(s))
	for name := range s {
		m[name] = redacted
	}
	return json.Marshal(m)
}

// marshalValues renders secrets.json with the real values.
func (s Secrets) marshalValues() ([]byte, error) {
	m := map[string]string(s)
	if m == nil {
		m = map[string]string{}
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal secrets: %w", err)
	}
	return append(data, '\n'), nil
}
