package lock

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/choirhq/choir/rpc"
)

// Errors returned for requests the manager cannot accept. They are wrapped
// with the offending key, mode or owner; match them with errors.Is.
var (
	ErrInvalidKey   = errors.New("invalid lock key")
	ErrInvalidMode  = errors.New("invalid lock mode")
	ErrInvalidOwner = errors.New("invalid lock owner")
)

// namespace is the kind of a resource key. The order of the constants is the
// canonical order of keys of different namespaces within a lockset.
type namespace uint8

const (
	nsInvalid namespace = iota
	nsWorkspace
	nsFile
	nsChoirTmp
	nsBrowserTab
	nsMem
	nsRepo
	nsNet
	nsExt
)

var nsNames = [...]string{
	nsInvalid:    "",
	nsWorkspace:  "workspace",
	nsFile:       "file",
	nsChoirTmp:   "choirtmp",
	nsBrowserTab: "browser_tab",
	nsMem:        "mem",
	nsRepo:       "repo",
	nsNet:        "net",
	nsExt:        "ext",
}

// Key names a lockable resource (spec 9.2). A Key can only be made by
// [ParseKey], [FileKey] or the variables below, so every Key a caller holds
// is valid and canonical; the zero Key is invalid and refused by the
// manager. Keys are comparable.
type Key struct {
	ns   namespace
	name string // the cleaned path for file keys, the suffix for reserved namespaces
}

// The keys without an argument.
var (
	// Workspace is the coarse lock over the whole leased workspace. It is
	// the root of the file tree: it overlaps every file key.
	Workspace = Key{ns: nsWorkspace}
	// ChoirTmp guards the .choirtmp/ staging area. It is independent of
	// Workspace and of every file key.
	ChoirTmp = Key{ns: nsChoirTmp}
	// BrowserTab guards the agent's browser context.
	BrowserTab = Key{ns: nsBrowserTab}
)

// FileKey returns the key file:<p> for a path relative to the workspace
// root. The path is cleaned lexically ("./src//a.go" becomes "src/a.go");
// absolute paths, paths that escape the workspace and the workspace root
// itself (lock [Workspace] for that) are refused. Symbolic links are not
// resolved here: confining paths to the workspace is the caller's job.
func FileKey(p string) (Key, error) {
	switch {
	case p == "":
		return Key{}, fmt.Errorf("file key: empty path: %w", ErrInvalidKey)
	case strings.IndexByte(p, 0) >= 0:
		return Key{}, fmt.Errorf("file key %q: path contains a NUL byte: %w", p, ErrInvalidKey)
	case p[0] == '/':
		return Key{}, fmt.Errorf("file key %q: absolute path, want a path relative to the workspace root: %w", p, ErrInvalidKey)
	}
	c := path.Clean(p)
	switch {
	case c == ".":
		return Key{}, fmt.Errorf("file key %q: names the workspace root, lock workspace instead: %w", p, ErrInvalidKey)
	case c == ".." || strings.HasPrefix(c, "../"):
		return Key{}, fmt.Errorf("file key %q: path escapes the workspace: %w", p, ErrInvalidKey)
	}
	return Key{ns: nsFile, name: c}, nil
}

// ParseKey parses a resource key as written in spec 9.2: "workspace",
// "choirtmp", "browser_tab", "file:<path>", or one of the reserved
// namespaces "mem:<workspace>", "repo:<workspace>", "net:<service>" and
// "ext:<provider>". A reserved name is 1 to 128 characters of letters,
// digits, '.', '_' and '-', starting with a letter or digit. Any other
// namespace is an error.
func ParseKey(s string) (Key, error) {
	ns, arg, hasArg := strings.Cut(s, ":")
	switch ns {
	case "workspace", "choirtmp", "browser_tab":
		if hasArg {
			return Key{}, fmt.Errorf("key %q: %s takes no argument: %w", s, ns, ErrInvalidKey)
		}
		switch ns {
		case "workspace":
			return Workspace, nil
		case "choirtmp":
			return ChoirTmp, nil
		default:
			return BrowserTab, nil
		}
	case "file":
		return FileKey(arg)
	case "mem", "repo", "net", "ext":
		if !validReservedName(arg) {
			return Key{}, fmt.Errorf("key %q: want %s:<name> with a name of letters, digits, '.', '_' and '-': %w", s, ns, ErrInvalidKey)
		}
		return Key{ns: namespace(slices.Index(nsNames[:], ns)), name: arg}, nil
	}
	return Key{}, fmt.Errorf("key %q: unknown namespace %q (want workspace, file, choirtmp, browser_tab, mem, repo, net or ext): %w", s, ns, ErrInvalidKey)
}

func validReservedName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// String returns the key as written in spec 9.2, e.g. "file:src/a.go".
func (k Key) String() string {
	if k.name == "" {
		return nsNames[k.ns]
	}
	return nsNames[k.ns] + ":" + k.name
}

// Namespace returns the key's namespace: "workspace", "file", "choirtmp",
// "browser_tab", "mem", "repo", "net" or "ext" ("" for the zero Key).
func (k Key) Namespace() string { return nsNames[k.ns] }

// Name returns the key's argument: the cleaned path of a file key, the
// name of a reserved key, "" for the others.
func (k Key) Name() string { return k.name }

// IsZero reports whether k is the zero (invalid) Key.
func (k Key) IsZero() bool { return k.ns == nsInvalid }

// MarshalText encodes the key as its string form.
func (k Key) MarshalText() ([]byte, error) {
	if k.IsZero() {
		return nil, fmt.Errorf("marshal zero key: %w", ErrInvalidKey)
	}
	return []byte(k.String()), nil
}

// UnmarshalText parses a key with [ParseKey].
func (k *Key) UnmarshalText(b []byte) error {
	v, err := ParseKey(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// compare orders keys by namespace, then by name.
func (k Key) compare(o Key) int {
	if k.ns != o.ns {
		return int(k.ns) - int(o.ns)
	}
	return strings.Compare(k.name, o.name)
}

// inTree reports whether k is part of the workspace tree: the workspace
// itself or a file below it.
func (k Key) inTree() bool { return k.ns == nsWorkspace || k.ns == nsFile }

// covers reports whether k is o or an ancestor of o in the workspace tree.
// Outside the tree a key covers only itself.
func (k Key) covers(o Key) bool {
	switch {
	case k == o:
		return true
	case k.ns == nsWorkspace:
		return o.ns == nsFile
	case k.ns == nsFile && o.ns == nsFile:
		return len(o.name) > len(k.name) && o.name[len(k.name)] == '/' && o.name[:len(k.name)] == k.name
	}
	return false
}

// overlaps reports whether the resources k and o share anything: the same
// key, or one above the other in the workspace tree.
func (k Key) overlaps(o Key) bool { return k.covers(o) || o.covers(k) }

// Mode is a lock mode: [S] (shared) or [X] (exclusive).
type Mode uint8

// The two lock modes of spec 9.1.
const (
	S Mode = 1 // shared: any number of S holders, no X holder
	X Mode = 2 // exclusive: a single holder
)

// String returns "S" or "X".
func (m Mode) String() string {
	switch m {
	case S:
		return "S"
	case X:
		return "X"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Valid reports whether m is S or X.
func (m Mode) Valid() bool { return m == S || m == X }

// Owner identifies who holds a lock: the edge lane or a named core job
// (spec 9.4). Make one with [Core] or [ParseOwner], or use [Edge]; the zero
// Owner is invalid and refused by the manager. Owners are comparable.
type Owner struct {
	name string
}

// Edge is the owner of the edge lane's locks.
var Edge = Owner{name: "edge"}

// Core returns the owner core:<job> of a core job's locks. Job names follow
// the lane names the commit log accepts: 1 to 64 letters, digits, '.', '_'
// and '-', starting with a letter or digit.
func Core(job string) (Owner, error) {
	return ParseOwner("core:" + job)
}

// ParseOwner parses "edge" or "core:<job>".
func ParseOwner(s string) (Owner, error) {
	if s == "edge" {
		return Edge, nil
	}
	if !strings.HasPrefix(s, "core:") || !rpc.ValidLane(s) {
		return Owner{}, fmt.Errorf("owner %q: want edge or core:<job> with a job name of 1 to 64 letters, digits, '.', '_' and '-': %w", s, ErrInvalidOwner)
	}
	return Owner{name: s}, nil
}

// String returns "edge" or "core:<job>".
func (o Owner) String() string { return o.name }

// IsEdge reports whether o is the edge lane.
func (o Owner) IsEdge() bool { return o.name == "edge" }

// IsCore reports whether o is a core job.
func (o Owner) IsCore() bool { return strings.HasPrefix(o.name, "core:") }

// IsZero reports whether o is the zero (invalid) Owner.
func (o Owner) IsZero() bool { return o.name == "" }

// MarshalText encodes the owner as its string form.
func (o Owner) MarshalText() ([]byte, error) {
	if o.IsZero() {
		return nil, fmt.Errorf("marshal zero owner: %w", ErrInvalidOwner)
	}
	return []byte(o.name), nil
}

// UnmarshalText parses an owner with [ParseOwner].
func (o *Owner) UnmarshalText(b []byte) error {
	v, err := ParseOwner(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}

// Request asks for one key in one mode.
type Request struct {
	Key  Key
	Mode Mode
}

// ParseRequest parses "<key>:<mode>", e.g. "workspace:X" or
// "file:src/a.go:S". The mode is taken after the last colon, so file paths
// may contain colons.
func ParseRequest(s string) (Request, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return Request{}, fmt.Errorf("lock request %q: want <key>:S or <key>:X: %w", s, ErrInvalidMode)
	}
	var m Mode
	switch s[i+1:] {
	case "S":
		m = S
	case "X":
		m = X
	default:
		return Request{}, fmt.Errorf("lock request %q: mode %q, want S or X: %w", s, s[i+1:], ErrInvalidMode)
	}
	k, err := ParseKey(s[:i])
	if err != nil {
		return Request{}, fmt.Errorf("lock request %q: %w", s, err)
	}
	return Request{Key: k, Mode: m}, nil
}

// String returns the request as "<key>:<mode>", the form the commit log
// records in tool_call_committed.locks.
func (r Request) String() string { return r.Key.String() + ":" + r.Mode.String() }

// MarshalText encodes the request as its string form.
func (r Request) MarshalText() ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	return []byte(r.String()), nil
}

// UnmarshalText parses a request with [ParseRequest].
func (r *Request) UnmarshalText(b []byte) error {
	v, err := ParseRequest(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

func (r Request) validate() error {
	if r.Key.IsZero() {
		return fmt.Errorf("lock request with the zero key: %w", ErrInvalidKey)
	}
	if !r.Mode.Valid() {
		return fmt.Errorf("lock request %s: mode %d: %w", r.Key, uint8(r.Mode), ErrInvalidMode)
	}
	return nil
}

// Strings returns the requests in their string form, for logging and for
// the locks field of tool_call_committed.
func Strings(reqs []Request) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.String()
	}
	return out
}

// Canonical returns the canonical form of a lockset in a new slice: every
// request validated, sorted by key, one request per key (S and X on the
// same key become X), and every request dropped that another request of the
// set already covers in an equal or stronger mode (workspace:X covers every
// file key; file:src:S covers file:src/a.go:S). The manager grants and
// reports locksets in this form.
func Canonical(reqs []Request) ([]Request, error) {
	out := make([]Request, len(reqs))
	n, err := canonicalInto(out, reqs)
	return out[:n], err
}

// canonicalInto writes the canonical form of reqs into dst, which must be
// at least len(reqs) long, and returns its length.
func canonicalInto(dst, reqs []Request) (int, error) {
	for _, r := range reqs {
		if err := r.validate(); err != nil {
			return 0, err
		}
	}
	copy(dst, reqs)
	dst = dst[:len(reqs)]
	// Insertion sort: locksets are a handful of keys, and slices.SortFunc
	// would cost more in setup than it saves.
	for i := 1; i < len(dst); i++ {
		for j := i; j > 0 && dst[j].Key.compare(dst[j-1].Key) < 0; j-- {
			dst[j], dst[j-1] = dst[j-1], dst[j]
		}
	}
	n := 0
	for _, r := range dst {
		if n > 0 && dst[n-1].Key == r.Key {
			dst[n-1].Mode = max(dst[n-1].Mode, r.Mode)
			continue
		}
		dst[n] = r
		n++
	}
	// Drop what another request of the set covers in an equal or stronger
	// mode. A covering key sorts before the keys it covers, but not
	// necessarily right before them, so compare every pair.
	out := dst[:n]
	m := 0
	for i, r := range out {
		covered := false
		for j, c := range out {
			if j != i && c.Key != r.Key && c.Key.covers(r.Key) && c.Mode >= r.Mode {
				covered = true
				break
			}
		}
		if !covered {
			out[m] = r
			m++
		}
	}
	return m, nil
}

// dirtyRead reports whether r, requested or held by ro, is the edge
// dirty-read exception against h held or requested by ho (spec 9.4): edge's
// file:<path>:S beside a core job's workspace:X.
func dirtyRead(r Request, ro Owner, h Request, ho Owner) bool {
	return r.Mode == S && r.Key.ns == nsFile && ro.IsEdge() &&
		h.Mode == X && h.Key.ns == nsWorkspace && ho.IsCore()
}

// conflicts reports whether a (of owner ao) and b (of owner bo) may not be
// held at the same time. It is symmetric; see the package documentation for
// why the dirty-read exception is.
func conflicts(a Request, ao Owner, b Request, bo Owner) bool {
	if a.Mode == S && b.Mode == S {
		return false
	}
	if !a.Key.overlaps(b.Key) {
		return false
	}
	return !dirtyRead(a, ao, b, bo) && !dirtyRead(b, bo, a, ao)
}

// Conflict reports whether two locksets of the same owner can not be held
// at once: whether a request of a overlaps a request of b (the same key, or
// one above the other in the workspace tree) and the two are not both S.
// It is the rule the manager applies; the dirty-read exception, which is
// between the edge and a core job, never applies within one owner. A
// caller that runs several calls of one owner at the same time (see
// arbiter.ProposeAll) uses it to order those whose locksets conflict, so
// that none of them waits for a lock its own owner holds.
func Conflict(a, b []Request) bool {
	for _, r := range a {
		for _, q := range b {
			if conflicts(r, Owner{}, q, Owner{}) {
				return true
			}
		}
	}
	return false
}
