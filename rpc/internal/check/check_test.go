package check

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// The checks run on every call are written by hand; these fuzz targets
// hold each to the definition it replaces.

// FuzzValidLane checks ValidLane against the regexp it replaces.
func FuzzValidLane(f *testing.F) {
	for _, s := range []string{"edge", "system", "core:a", "core:", "core:-a", "core:a-b.c_d", "edge\n", "core:" + strings.Repeat("a", 64), "core:" + strings.Repeat("a", 65), "Edge", "core:é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lane string) {
		if got, want := ValidLane(lane), LanePattern.MatchString(lane); got != want {
			t.Fatalf("ValidLane(%q) = %v, the regexp says %v", lane, got, want)
		}
	})
}

// FuzzValidID checks ValidID against the regexp it replaces.
func FuzzValidID(f *testing.F) {
	for _, s := range []string{"a", "", "6f1c2b0e-3b8e-4c1e-9d36-0d7a2b1f9e11", "-a", "a.b_c:d-e", "a b", "a\n", strings.Repeat("a", 128), strings.Repeat("a", 129), "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := ValidID(id), IDPattern.MatchString(id); got != want {
			t.Fatalf("ValidID(%q) = %v, the regexp says %v", id, got, want)
		}
	})
}

// FuzzSessionID checks IsSessionID against parsing and rendering a UUID.
func FuzzSessionID(f *testing.F) {
	for _, s := range []string{uuid.NewString(), strings.ToUpper(uuid.NewString()), "{" + uuid.NewString() + "}", "urn:uuid:" + uuid.NewString(), strings.ReplaceAll(uuid.NewString(), "-", ""), ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		u, err := uuid.Parse(id)
		want := err == nil && u.String() == id
		if got := IsSessionID(id); got != want {
			t.Fatalf("IsSessionID(%q) = %v, uuid says %v", id, got, want)
		}
	})
}

// FuzzLeaseTokenFormat checks ValidLeaseTokenFormat against strict
// base64url decoding, which also skips CR and LF: a token with them is
// refused now (no HTTP header can carry one anyway).
func FuzzLeaseTokenFormat(f *testing.F) {
	var b [LeaseTokenBytes]byte
	rand.Read(b[:]) // A fresh token, as rpc.NewLeaseToken makes them.
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	for _, s := range []string{tok, tok[:42] + "B", tok[:42] + "=", tok + "A", tok[:42], strings.Repeat("_", 42) + "w", strings.Repeat("+", 43), "00000000\r\r\r" + strings.Repeat("0", 32)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		_, err := base64.RawURLEncoding.Strict().DecodeString(token)
		want := len(token) == 43 && err == nil && !strings.ContainsAny(token, "\r\n")
		if got := ValidLeaseTokenFormat(token); got != want {
			t.Fatalf("ValidLeaseTokenFormat(%q) = %v, base64 says %v", token, got, want)
		}
	})
}
