package offer_test

import (
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/offer"
)

func TestPlanChoosesModeFromWindow(t *testing.T) {
	t.Parallel()
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	direct := offer.PlanFor(reg, tool.Filter{Lane: tool.LaneEdge}, 1<<30, offer.ModeAuto)
	if direct.Mode != offer.ModeDirect || direct.CompactTokens >= direct.DirectTokens {
		t.Fatalf("huge window: %+v", direct)
	}
	// A window whose 20% holds the compact form but not the full one.
	window := int64(direct.CompactTokens+direct.DirectTokens) / 2 * 100 / offer.SchemaBudgetPercent
	for _, tc := range []struct {
		name   string
		window int64
		forced offer.Mode
		want   offer.Mode
	}{
		{"FitsDirect", int64(direct.DirectTokens) * 100 / offer.SchemaBudgetPercent, offer.ModeAuto, offer.ModeDirect},
		{"FitsCompact", window, offer.ModeAuto, offer.ModeCompact},
		{"FitsNeither", int64(direct.CompactTokens-1) * 100 / offer.SchemaBudgetPercent, offer.ModeAuto, offer.ModeDiscovery},
		{"ForcedWins", 1 << 30, offer.ModeDiscovery, offer.ModeDiscovery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := offer.PlanFor(reg, tool.Filter{Lane: tool.LaneEdge}, tc.window, tc.forced)
			if p.Mode != tc.want || p.Forced != (tc.forced != offer.ModeAuto) {
				t.Errorf("plan = %+v, want mode %s", p, tc.want)
			}
		})
	}
	// Core jobs never get discovery mode: their prompt is rebuilt from the
	// log, which does not keep loaded schemas.
	inj := offer.NewInjector(reg, offer.InjectorConfig{Mode: offer.ModeDiscovery})
	if m := inj.Plan(tool.LaneCore, 1<<20).Mode; m != offer.ModeCompact {
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
