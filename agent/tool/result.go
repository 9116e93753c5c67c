package tool

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/choirhq/choir/rpc/usage"
	"io/fs"
	"os"
	"path"
	"unicode/utf8"
)

// Status is the outcome of a tool call.
type Status string

// The outcomes of spec 8.5.
const (
	StatusSuccess Status = "success"
	StatusError   Status = "error"
	// StatusInDoubt is a tool's answer that it cannot tell whether its
	// effect happened (a keyed call run again after a restart whose first
	// run it cannot find); it did nothing more, and the user is told.
	StatusInDoubt Status = "in_doubt"
)

// Result is the structured output of a tool call (spec 8.5).
type Result struct {
	Status Status `json:"status"`
	// Summary is one line for the model and the log.
	Summary string `json:"summary"`
	// Output is the tool's structured output, any JSON value.
	Output json.RawMessage `json:"output,omitempty"`
	// ArtifactRef, when set, is the workspace-relative path of the full
	// output (.choirtmp/artifacts/<sha256>), readable with choir.fs.read.
	ArtifactRef string `json:"artifact_ref,omitempty"`
	// Truncated says Output is a preview of a larger output.
	Truncated bool `json:"truncated,omitempty"`
	// Masked says the output was withheld from the prompt (prompt_mask).
	Masked bool `json:"masked,omitempty"`
	// Usage is what the call used of paid services (TTS characters,
	// search queries), with its cost where priced: a built-in tool sets
	// it, a host or external tool sends it as "usage". The arbiter takes
	// it out of the result, commits it beside the result and counts it
	// against the agent's caps; the model never sees it.
	Usage []usage.Record `json:"usage,omitempty"`
}

// JSON returns the result as the JSON a model receives.
func (r Result) JSON() json.RawMessage {
	b, err := json.Marshal(r)
	if err != nil {
		// Output is the only field that can fail to marshal, and every
		// producer sets it from valid JSON; keep the result usable anyway.
		r.Output = nil
		b, _ = json.Marshal(r)
	}
	return b
}

// ErrorResult is the result of a failed call whose reason the model
// should see.
func ErrorResult(format string, args ...any) Result {
	return Result{Status: StatusError, Summary: fmt.Sprintf(format, args...)}
}

// SuccessResult builds a successful result around an output value.
func SuccessResult(summary string, output any) Result {
	b, err := MarshalNoEscape(output)
	if err != nil {
		return ErrorResult("encode output: %v", err)
	}
	return Result{Status: StatusSuccess, Summary: summary, Output: b}
}

// MarshalNoEscape encodes v without HTML escaping: outputs are read by
// models and people, and "<" as \u003c only costs tokens.
func MarshalNoEscape(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Limits bound what tools keep and what models see. A zero field takes its
// default.
type Limits struct {
	// ResultBytes is the largest output a model sees in one result
	// (default 16 KiB); more is spilled to an artifact.
	ResultBytes int
	// CaptureBytes is the most output kept from a process (default
	// 1 MiB): choir.exec keeps its head and tail, an external tool whose
	// stdout is larger fails.
	CaptureBytes int
}

// Default limits.
const (
	DefaultResultBytes  = 16 << 10
	DefaultCaptureBytes = 1 << 20
	minResultBytes      = 1 << 10
	maxSummaryBytes     = 2 << 10
)

// WithDefaults returns l with every zero field set to its default,
// ResultBytes at least 1 KiB and CaptureBytes at least ResultBytes.
func (l Limits) WithDefaults() Limits {
	if l.ResultBytes <= 0 {
		l.ResultBytes = DefaultResultBytes
	}
	l.ResultBytes = max(l.ResultBytes, minResultBytes)
	if l.CaptureBytes <= 0 {
		l.CaptureBytes = DefaultCaptureBytes
	}
	l.CaptureBytes = max(l.CaptureBytes, l.ResultBytes)
	return l
}

// Env is what a tool call executes in.
type Env struct {
	// Workspace is the absolute path of the leased workspace root.
	Workspace string
	// SecretFunc looks up a secret by name. [Def.Execute] hands a tool a
	// SecretFunc that answers only the secrets its runtime view declares.
	SecretFunc func(name string) (string, bool)
	// Limits bound output sizes.
	Limits Limits
}

// Secret returns the named secret, if the environment provides it.
func (e Env) Secret(name string) (string, bool) {
	if e.SecretFunc == nil {
		return "", false
	}
	return e.SecretFunc(name)
}

// scoped returns env restricted to the named secrets, with limits filled in.
func (e Env) scoped(names []string) Env {
	e.Limits = e.Limits.WithDefaults()
	parent := e.SecretFunc
	allowed := make(map[string]bool, len(names))
	for _, n := range names {
		allowed[n] = true
	}
	e.SecretFunc = func(name string) (string, bool) {
		if !allowed[name] || parent == nil {
			return "", false
		}
		return parent(name)
	}
	return e
}

// artifactDir is where spilled outputs go, relative to the workspace.
const artifactDir = ChoirTmpDir + "/artifacts"

// WriteArtifact stores data content-addressed under .choirtmp/artifacts
// and returns its workspace-relative path.
func WriteArtifact(ws string, data []byte) (string, error) {
	if ws == "" {
		return "", fmt.Errorf("write artifact: no workspace")
	}
	sum := sha256.Sum256(data)
	rel := path.Join(artifactDir, hex.EncodeToString(sum[:]))
	root, err := os.OpenRoot(ws)
	if err != nil {
		return "", fmt.Errorf("write artifact: %w", err)
	}
	defer root.Close()
	if fi, err := root.Lstat(rel); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(len(data)) {
		return rel, nil // content-addressed: already there
	}
	if err := root.MkdirAll(artifactDir, 0o755); err != nil {
		return "", fmt.Errorf("write artifact: %w", err)
	}
	if err := WriteFileAtomic(root, rel, data, 0o644); err != nil {
		return "", fmt.Errorf("write artifact: %w", err)
	}
	return rel, nil
}

// WriteFileAtomic writes data to name inside root through a temporary file
// in the same directory and a rename, so readers see the old content or the
// new, never a part.
func WriteFileAtomic(root *os.Root, name string, data []byte, perm fs.FileMode) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".choir-tmp-"+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = root.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	// O_CREATE applied the umask; give the file the mode asked for.
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := root.Rename(tmp, name); err != nil {
		_ = root.Remove(tmp)
		ok = true
		return err
	}
	ok = true
	return nil
}

// shape normalises a tool's result and spills an output larger than
// ResultBytes to an artifact, leaving a preview.
func shape(env Env, r Result) Result {
	lim := env.Limits.WithDefaults()
	if r.Status != StatusSuccess && r.Status != StatusError && r.Status != StatusInDoubt {
		r.Status = StatusError
	}
	r.Summary = TruncateUTF8(r.Summary, maxSummaryBytes)
	r.Masked = false
	if len(r.Output) <= lim.ResultBytes || r.ArtifactRef != "" {
		return r
	}
	text := artifactText(r.Output)
	ref, err := WriteArtifact(env.Workspace, text)
	note := fmt.Sprintf("\n[output truncated: %d bytes in all; read artifact_ref with choir.fs.read for the rest]", len(text))
	if err != nil {
		note = fmt.Sprintf("\n[output truncated: %d bytes in all; the rest could not be saved]", len(text))
	}
	r.Output = FitString(lim.ResultBytes, func(n int) string { return TruncateUTF8(string(text), n) + note })
	r.ArtifactRef = ref
	r.Truncated = true
	return r
}

// artifactText renders an output for reading with choir.fs.read: a JSON
// string as its text, anything else as indented JSON.
func artifactText(out json.RawMessage) []byte {
	var s string
	if json.Unmarshal(out, &s) == nil {
		return []byte(s)
	}
	var buf bytes.Buffer
	if json.Indent(&buf, out, "", "  ") == nil {
		return buf.Bytes()
	}
	return out
}

// TruncateUTF8 cuts s to at most n bytes without splitting a character.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// TailUTF8 returns the last at most n bytes of s without splitting a
// character.
func TailUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// FitString encodes the longest render(n) whose JSON fits in limit bytes,
// halving n from limit: escaping can make the JSON of a string several
// times longer than the string.
func FitString(limit int, render func(n int) string) json.RawMessage {
	for n := limit; ; n /= 2 {
		b, _ := MarshalNoEscape(render(n)) // a string always encodes
		if len(b) <= limit || n == 0 {
			return b
		}
	}
}
