// Package check holds the syntax of the agent protocol's scalar fields and
// the primitives its payloads' Validate methods are written with: the
// patterns of agent, request, tool, secret and state names, the hand-written
// matchers that every call runs instead of a regexp (IDs, lanes, session
// IDs, lease tokens), checks of text, JSON objects and send paths, and the
// error that names the JSON path of a problem. Package rpc keeps the
// payloads and exports the matchers its callers need.
package check

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"
)

var (
	AgentIDPattern     = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,39}$`)
	IDPattern          = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	ToolNamePattern    = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*){0,7}$`)
	SecretPattern      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	RequestTypePattern = regexp.MustCompile(`^[a-z][a-z0-9_.:-]{0,63}$`)
	StateNamePattern   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.:-]{0,63}$`)
)

// Field length caps, in bytes, for free-text fields that are not bounded by
// a pattern. The payload-size cap bounds everything else.
const (
	MaxShortText = 256
	MaxReason    = 4096
	MaxPathLen   = 1024
)

// ValidAgentID reports whether id is a valid agent ID (the
// choir_control.agent_id domain).
func ValidAgentID(id string) bool { return AgentIDPattern.MatchString(id) }

// ValidID reports whether id is a valid request, call or message ID: 1-128
// characters of letters, digits and . _ : -, starting with a letter or
// digit. UUIDs qualify.
//
// It matches exactly what IDPattern matches, without the regexp engine: every
// call's request ID is checked.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 128 || !isAlnum(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && c != '.' && c != '_' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func Invalid(path, format string, args ...any) error {
	return fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...))
}

func Text(path, s string, maxLen int, required bool) error {
	switch {
	case required && s == "":
		return Invalid(path, "required")
	case len(s) > maxLen:
		return Invalid(path, "%d bytes, over the limit of %d", len(s), maxLen)
	case !utf8.ValidString(s):
		return Invalid(path, "not valid UTF-8")
	}
	return nil
}

func Pattern(path, s string, re *regexp.Regexp, what string) error {
	if s == "" {
		return Invalid(path, "required")
	}
	if !re.MatchString(s) {
		return Invalid(path, "not a valid %s (want %s)", what, re.String())
	}
	return nil
}

// Object requires raw to be a JSON object. Strict decoding has already
// proved it well-formed.
func Object(path string, raw json.RawMessage, required bool) error {
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) == 0 {
		if required {
			return Invalid(path, "required")
		}
		return nil
	}
	if trimmed[0] != '{' {
		return Invalid(path, "must be a JSON object")
	}
	return nil
}

// SendPath requires p to be a clean relative path that stays inside
// the send directory.
func SendPath(field, p string) error {
	if err := Text(field, p, MaxPathLen, true); err != nil {
		return err
	}
	switch {
	case strings.ContainsRune(p, 0):
		return Invalid(field, "contains NUL")
	case path.IsAbs(p):
		return Invalid(field, "must be relative to .choirtmp/send")
	case path.Clean(p) != p:
		return Invalid(field, "must be a clean path")
	case p == ".." || strings.HasPrefix(p, "../"):
		return Invalid(field, "must stay inside .choirtmp/send")
	}
	return nil
}

// SessionID requires a UUID in canonical lowercase form, as
// choir_control.sessions.session_id renders it.
func SessionID(path, id string) error {
	if id == "" {
		return Invalid(path, "required")
	}
	if !IsSessionID(id) {
		return Invalid(path, "not a session ID (want a lowercase UUID)")
	}
	return nil
}

// IsSessionID reports whether id is a UUID as uuid.UUID.String writes it:
// lowercase hex digits grouped 8-4-4-4-12. It checks every call, so it
// avoids parsing and re-rendering the UUID.
func IsSessionID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// Quote quotes s for an error message, truncated: it comes from the
// peer and may be long.
func Quote(s string) string {
	const limit = 64
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// LanePattern matches the lanes the session_events CHECK constraint accepts:
// "edge", "system", or "core:<job-name>".
var LanePattern = regexp.MustCompile(`^(edge|system|core:[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$`)

// ValidLane reports whether lane names a lane the log accepts. It matches
// exactly what LanePattern matches, without the regexp engine: every event of
// every heartbeat is checked.
func ValidLane(lane string) bool {
	switch lane {
	case "edge", "system":
		return true
	}
	job, ok := strings.CutPrefix(lane, "core:")
	if !ok || len(job) == 0 || len(job) > 64 || !isJobChar(job[0], false) {
		return false
	}
	for i := 1; i < len(job); i++ {
		if !isJobChar(job[i], true) {
			return false
		}
	}
	return true
}

func isJobChar(c byte, inner bool) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case inner:
		return c == '_' || c == '.' || c == '-'
	}
	return false
}

// LeaseTokenBytes is the entropy of a lease token: 256 bits.
const LeaseTokenBytes = 32

// ValidLeaseTokenFormat reports whether token has the form NewLeaseToken
// produces. A malformed token is refused before any lookup.
func ValidLeaseTokenFormat(token string) bool {
	// Strict unpadded base64url of 32 bytes: 43 characters of the
	// alphabet, the last carrying 2 bits of padding that must be zero.
	// Checked by hand, without decoding into a fresh buffer, on every call.
	if len(token) != base64.RawURLEncoding.EncodedLen(LeaseTokenBytes) {
		return false
	}
	for i := 0; i < len(token); i++ {
		if base64URLValue(token[i]) < 0 {
			return false
		}
	}
	return base64URLValue(token[len(token)-1])&3 == 0
}

// base64URLValue is the 6-bit value of a base64url character, or -1.
func base64URLValue(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c - 'A')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 26
	case '0' <= c && c <= '9':
		return int(c-'0') + 52
	case c == '-':
		return 62
	case c == '_':
		return 63
	}
	return -1
}
