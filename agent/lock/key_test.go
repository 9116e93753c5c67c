package lock_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/choirhq/choir/agent/lock"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		wantErr  error
	}{
		{in: "workspace", want: "workspace"},
		{in: "choirtmp", want: "choirtmp"},
		{in: "browser_tab", want: "browser_tab"},
		{in: "file:src/a.go", want: "file:src/a.go"},
		{in: "file:./src//b/../a.go", want: "file:src/a.go"},
		{in: "file:src/", want: "file:src"},
		{in: "file:a:b.txt", want: "file:a:b.txt"},
		{in: "file:..foo", want: "file:..foo"},
		{in: "mem:main", want: "mem:main"},
		{in: "repo:main", want: "repo:main"},
		{in: "net:api.brave.com", want: "net:api.brave.com"},
		{in: "ext:notion", want: "ext:notion"},
		{in: "", wantErr: lock.ErrInvalidKey},
		{in: "workspaces", wantErr: lock.ErrInvalidKey},
		{in: "workspace:main", wantErr: lock.ErrInvalidKey},
		{in: "choirtmp:send", wantErr: lock.ErrInvalidKey},
		{in: "dir:src", wantErr: lock.ErrInvalidKey},
		{in: "File:a.go", wantErr: lock.ErrInvalidKey},
		{in: "file", wantErr: lock.ErrInvalidKey},
		{in: "file:", wantErr: lock.ErrInvalidKey},
		{in: "file:/etc/passwd", wantErr: lock.ErrInvalidKey},
		{in: "file:..", wantErr: lock.ErrInvalidKey},
		{in: "file:../x", wantErr: lock.ErrInvalidKey},
		{in: "file:a/../../x", wantErr: lock.ErrInvalidKey},
		{in: "file:.", wantErr: lock.ErrInvalidKey},
		{in: "file:a/..", wantErr: lock.ErrInvalidKey},
		{in: "file:a\x00b", wantErr: lock.ErrInvalidKey},
		{in: "mem:", wantErr: lock.ErrInvalidKey},
		{in: "net:-x", wantErr: lock.ErrInvalidKey},
		{in: "ext:a b", wantErr: lock.ErrInvalidKey},
		{in: "repo:a/b", wantErr: lock.ErrInvalidKey},
	} {
		k, err := lock.ParseKey(tc.in)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("ParseKey(%q) = %v, %v; want error %v", tc.in, k, err, tc.wantErr)
			}
			continue
		}
		if err != nil || k.String() != tc.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", tc.in, k, err, tc.want)
		}
	}
}

func TestParseRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		wantErr  error
	}{
		{in: "workspace:X", want: "workspace:X"},
		{in: "file:./a.go:S", want: "file:a.go:S"},
		{in: "file:a:b.go:X", want: "file:a:b.go:X"},
		{in: "choirtmp:X", want: "choirtmp:X"},
		{in: "workspace", wantErr: lock.ErrInvalidMode},
		{in: "workspace:W", wantErr: lock.ErrInvalidMode},
		{in: "workspace:x", wantErr: lock.ErrInvalidMode},
		{in: "nope:a:S", wantErr: lock.ErrInvalidKey},
		{in: "file:../a:S", wantErr: lock.ErrInvalidKey},
	} {
		r, err := lock.ParseRequest(tc.in)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("ParseRequest(%q) = %v, %v; want error %v", tc.in, r, err, tc.wantErr)
			}
			continue
		}
		if err != nil || r.String() != tc.want {
			t.Errorf("ParseRequest(%q) = %q, %v; want %q", tc.in, r, err, tc.want)
		}
	}
}

func TestParseOwner(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"edge", "core:refactor-auth", "core:a", "core:write_tests.2"} {
		o, err := lock.ParseOwner(ok)
		if err != nil || o.String() != ok {
			t.Errorf("ParseOwner(%q) = %q, %v", ok, o, err)
		}
	}
	for _, bad := range []string{"", "system", "Edge", "core:", "core:-x", "core:a b", "core", "lane:x"} {
		if _, err := lock.ParseOwner(bad); !errors.Is(err, lock.ErrInvalidOwner) {
			t.Errorf("ParseOwner(%q) error = %v, want ErrInvalidOwner", bad, err)
		}
	}
	t.Run("CoreBuildsTheOwner", func(t *testing.T) {
		t.Parallel()
		o, err := lock.Core("write-tests")
		if err != nil || o.String() != "core:write-tests" || !o.IsCore() || o.IsEdge() {
			t.Fatalf("Core = %q, %v", o, err)
		}
		if !lock.Edge.IsEdge() || lock.Edge.IsCore() {
			t.Fatal("Edge is not edge")
		}
	})
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []string
		want []string
	}{
		{"EmptyStaysEmpty", nil, []string{}},
		{"SortedByNamespaceThenName", []string{"net:x:S", "choirtmp:X", "file:b:S", "browser_tab:X", "file:a:S", "ext:y:X"},
			[]string{"file:a:S", "file:b:S", "choirtmp:X", "browser_tab:X", "net:x:S", "ext:y:X"}},
		{"DuplicatesCollapse", []string{"file:a:S", "file:./a:S"}, []string{"file:a:S"}},
		{"SharedAndExclusiveBecomeExclusive", []string{"file:a:S", "file:a:X", "file:a:S"}, []string{"file:a:X"}},
		{"WorkspaceXCoversFiles", []string{"file:a:X", "workspace:X", "file:b/c:S"}, []string{"workspace:X"}},
		{"WorkspaceXLeavesChoirTmp", []string{"workspace:X", "choirtmp:X"}, []string{"workspace:X", "choirtmp:X"}},
		{"WorkspaceSCoversFileS", []string{"workspace:S", "file:a:S"}, []string{"workspace:S"}},
		{"WorkspaceSKeepsFileX", []string{"workspace:S", "file:a:X"}, []string{"workspace:S", "file:a:X"}},
		{"DirectoryCoversItsFiles", []string{"file:src/a.go:S", "file:src:S", "file:src2:S"}, []string{"file:src:S", "file:src2:S"}},
		{"CoveringNeedNotBeAdjacent", []string{"file:a:X", "file:a.go:S", "file:a/b:S"}, []string{"file:a:X", "file:a.go:S"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := lock.Canonical(reqs(t, tc.in...))
			if err != nil {
				t.Fatal(err)
			}
			if s := lock.Strings(got); !slices.Equal(s, tc.want) {
				t.Fatalf("Canonical(%q) = %q, want %q", tc.in, s, tc.want)
			}
		})
	}
	t.Run("InputIsNotModified", func(t *testing.T) {
		t.Parallel()
		in := reqs(t, "file:b:S", "file:a:S")
		if _, err := lock.Canonical(in); err != nil {
			t.Fatal(err)
		}
		if in[0].Key.Name() != "b" {
			t.Fatal("Canonical sorted its input in place")
		}
	})
	t.Run("ZeroKeyAndBadModeAreRefused", func(t *testing.T) {
		t.Parallel()
		if _, err := lock.Canonical([]lock.Request{{Mode: lock.S}}); !errors.Is(err, lock.ErrInvalidKey) {
			t.Errorf("zero key: %v", err)
		}
		if _, err := lock.Canonical([]lock.Request{{Key: lock.Workspace, Mode: 7}}); !errors.Is(err, lock.ErrInvalidMode) {
			t.Errorf("bad mode: %v", err)
		}
	})
}

func TestTextRoundTrip(t *testing.T) {
	t.Parallel()
	type doc struct {
		Owner lock.Owner     `json:"owner"`
		Locks []lock.Request `json:"locks"`
		Key   lock.Key       `json:"key"`
	}
	in := doc{Owner: mustOwner(t, "core:x"), Locks: reqs(t, "workspace:X", "file:a b.go:S"), Key: lock.ChoirTmp}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"owner":"core:x","locks":["workspace:X","file:a b.go:S"],"key":"choirtmp"}`; string(b) != want {
		t.Fatalf("marshal = %s, want %s", b, want)
	}
	var out doc
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Owner != in.Owner || !slices.Equal(out.Locks, in.Locks) || out.Key != in.Key {
		t.Fatalf("round trip = %+v, want %+v", out, in)
	}
	if err := json.Unmarshal([]byte(`{"locks":["tmp:X"]}`), &out); !errors.Is(err, lock.ErrInvalidKey) {
		t.Fatalf("unknown namespace unmarshalled: %v", err)
	}
}

func reqs(t testing.TB, ss ...string) []lock.Request {
	t.Helper()
	out := make([]lock.Request, len(ss))
	for i, s := range ss {
		r, err := lock.ParseRequest(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = r
	}
	return out
}

func mustOwner(t testing.TB, s string) lock.Owner {
	t.Helper()
	o, err := lock.ParseOwner(s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
