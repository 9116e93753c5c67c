package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

func TestNotExecutedTools(t *testing.T) {
	t.Parallel()
	b := tooltest.Setup(t, builtin.Config{Tools: []tool.Tool{panicTool{}}})

	t.Run("HostMetaAndRuntimeToolsAreNotExecuted", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{tool.NameMemoryQuery, tool.NameMemoryUpsert, tool.NameMemoryCompact, tool.NameProposeTool} {
			d, _ := b.Reg.Lookup(name)
			_, err := d.Execute(context.Background(), b.Env, json.RawMessage(`{}`))
			if !errors.Is(err, tool.ErrNotExecutable) {
				t.Errorf("%s: got %v, want ErrNotExecutable", name, err)
			}
		}
	})

	t.Run("HostResultIsShaped", func(t *testing.T) {
		t.Parallel()
		d, _ := b.Reg.Lookup(tool.NameMemoryQuery)
		env := b.Env
		env.Limits.ResultBytes = 2048
		big, _ := json.Marshal(map[string]string{"hits": strings.Repeat("memory ", 1000)})
		r := d.Shape(env, tool.Result{Status: "weird", Summary: "s", Output: big})
		if r.Status != tool.StatusError || !r.Truncated || r.ArtifactRef == "" || len(r.Output) > 2048 {
			t.Errorf("got status %s truncated %v ref %q len %d", r.Status, r.Truncated, r.ArtifactRef, len(r.Output))
		}
		if got := tooltest.ReadFile(t, filepath.Join(b.WS, r.ArtifactRef)); !strings.Contains(got, "\n  \"hits\": ") {
			t.Errorf("artifact is not indented JSON: %.60q", got)
		}
	})

	t.Run("PanicIsAnError", func(t *testing.T) {
		t.Parallel()
		d, _ := b.Reg.Lookup("test.panic")
		_, err := d.Execute(context.Background(), b.Env, json.RawMessage(`{}`))
		if !errors.Is(err, tool.ErrToolPanic) {
			t.Errorf("got %v", err)
		}
	})

	t.Run("UnknownTool", func(t *testing.T) {
		t.Parallel()
		if _, err := b.Reg.Get("no.such"); !errors.Is(err, tool.ErrUnknownTool) {
			t.Errorf("got %v", err)
		}
	})

	t.Run("NoArtifactWithoutWorkspace", func(t *testing.T) {
		t.Parallel()
		d, _ := b.Reg.Lookup(tool.NameMemoryQuery)
		r := d.Shape(tool.Env{}, tool.Result{Status: tool.StatusSuccess, Summary: "s", Output: json.RawMessage(`"` + strings.Repeat("x", 40000) + `"`)})
		if !r.Truncated || r.ArtifactRef != "" || len(r.Output) > tool.DefaultResultBytes {
			t.Errorf("got %+v", r.ArtifactRef)
		}
		if _, err := os.Stat(".choirtmp"); err == nil {
			t.Error("wrote an artifact into the test's directory")
		}
	})
}
