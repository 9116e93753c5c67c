package tool_test

import (
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

func TestPlanChoosesModeFromWindow(t *testing.T) {
	t.Parallel()
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	direct := reg.Plan(tool.Filter{Lane: tool.LaneEdge}, 1<<30, tool.ModeAuto)
	if direct.Mode != tool.ModeDirect || direct.CompactTokens >= direct.DirectTokens {
		t.Fatalf("huge window: %+v", direct)
	}
	// A window whose 20% holds the compact form but not the full one.
	window := int64(direct.CompactTokens+direct.DirectTokens) / 2 * 100 / tool.SchemaBudgetPercent
	for _, tc := range []struct {
		name   string
		window int64
		forced tool.Mode
		want   tool.Mode
	}{
		{"FitsDirect", int64(direct.DirectTokens) * 100 / tool.SchemaBudgetPercent, tool.ModeAuto, tool.ModeDirect},
		{"FitsCompact", window, tool.ModeAuto, tool.ModeCompact},
		{"FitsNeither", int64(direct.CompactTokens-1) * 100 / tool.SchemaBudgetPercent, tool.ModeAuto, tool.ModeDiscovery},
		{"ForcedWins", 1 << 30, tool.ModeDiscovery, tool.ModeDiscovery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := reg.Plan(tool.Filter{Lane: tool.LaneEdge}, tc.window, tc.forced)
			if p.Mode != tc.want || p.Forced != (tc.forced != tool.ModeAuto) {
				t.Errorf("plan = %+v, want mode %s", p, tc.want)
			}
		})
	}
	// Core jobs never get discovery mode: their prompt is rebuilt from the
	// log, which does not keep loaded schemas.
	inj := tool.NewInjector(reg, tool.InjectorConfig{Mode: tool.ModeDiscovery})
	if m := inj.Plan(tool.LaneCore, 1<<20).Mode; m != tool.ModeCompact {
		t.Errorf("core lane mode = %s, want compact", m)
	}
}

func TestCorpusHashFollowsManifest(t *testing.T) {
	t.Parallel()
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	corpus, h1 := reg.Corpus()
	_, h2 := reg.Corpus()
	if h1 != h2 || len(corpus) != len(reg.Names()) {
		t.Fatalf("hash unstable or corpus short: %s %s %d", h1, h2, len(corpus))
	}
	d, _ := reg.Lookup(tool.NameFSWrite)
	for _, want := range []string{"choir.fs.write", "content", "side effect write"} {
		if !strings.Contains(d.SearchText(), want) {
			t.Errorf("corpus of choir.fs.write lacks %q: %s", want, d.SearchText())
		}
	}
}
