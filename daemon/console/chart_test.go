package console

import (
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc/admin"
)

// TestDayChartDrawsTheCap draws three days under a cap above them all:
// the cap's line sits above every bar, at its height on the same scale.
func TestDayChartDrawsTheCap(t *testing.T) {
	days := lastDays("2026-11-29", 3)
	if strings.Join(days, " ") != "2026-11-27 2026-11-28 2026-11-29" {
		t.Fatalf("days %v", days)
	}
	c := dayChart("spend", days, []float64{1, 0, 2}, 4, func(f float64) string { return "x" })
	if c.Cap == nil {
		t.Fatal("no cap line")
	}
	plot := float64(chartHeight - chartTop - chartBottom)
	base := chartTop + plot
	// The scale's top is a tenth above the cap: the cap at 1/1.1 of the
	// plot, the bar of 2 at half of that.
	if got, want := base-c.Cap.Y, plot/1.1; abs(got-want) > 1e-9 {
		t.Errorf("cap at %.2f above the axis, want %.2f", got, want)
	}
	if got, want := c.Bars[2].H, plot/1.1/2; abs(got-want) > 1e-9 || c.Bars[1].H != 0 || c.Bars[2].Y+c.Bars[2].H != base {
		t.Errorf("bars %+v", c.Bars)
	}
	if none := dayChart("spend", days, []float64{0, 0, 0}, 0, func(float64) string { return "" }); none.Cap != nil {
		t.Error("a cap line without a cap")
	}
}

func abs(f float64) float64 { return max(f, -f) }

// TestShareChartScalesToTheLargest draws three slices by cost: the
// costliest fills the bar, the others their share of it; with no cost
// at all, tokens set the scale.
func TestShareChartScalesToTheLargest(t *testing.T) {
	c := shareChart("by model", []admin.UsageSlice{
		{Name: "llm:big", UsageTotals: admin.UsageTotals{Tokens: 10, CostUSD: 2}},
		{Name: "llm:small", UsageTotals: admin.UsageTotals{Tokens: 1000, CostUSD: 0.5}},
		{Name: "search:brave", UsageTotals: admin.UsageTotals{CostUSD: 0}}})
	if len(c.Rows) != 3 || c.Rows[0].W != shareBarWidth || c.Rows[1].W != shareBarWidth/4 || c.Rows[2].W != 0 ||
		c.Rows[1].Y != shareRowHeight || c.Height != 3*shareRowHeight {
		t.Errorf("rows %+v", c.Rows)
	}
	free := shareChart("by lane", []admin.UsageSlice{{Name: "edge", UsageTotals: admin.UsageTotals{Tokens: 300}},
		{Name: "core:a", UsageTotals: admin.UsageTotals{Tokens: 100}}})
	if free.Rows[0].W != shareBarWidth || abs(free.Rows[1].W-float64(shareBarWidth)/3) > 1e-9 {
		t.Errorf("by tokens: %+v", free.Rows)
	}
}
