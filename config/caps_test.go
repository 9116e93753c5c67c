package config_test

import (
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/strictjson"
)

// TestValidateCapsAndPrices refuses negative caps and prices, naming
// each field's JSON path with an example, and a prices object without a
// price.
func TestValidateCapsAndPrices(t *testing.T) {
	t.Parallel()
	c, s := specConfig(t), specSecrets()
	a := c.Agents["agent-1"]
	a.Budgets.Caps = config.Caps{PerDayCostUSD: -1, PerJobTokens: -5, SessionCostUSD: 2}
	c.Agents["agent-1"] = a
	m := c.Models["sonnet"]
	m.Prices = &config.Prices{InputPerMTok: -3, OutputPerMTok: 15}
	c.Models["sonnet"] = m
	o := c.Models["o3"]
	o.Prices = &config.Prices{CachedInputPerMTok: 1}
	c.Models["o3"] = o
	checkProblems(t, problems(t, c.Validate(s)), []string{
		`$.models.o3.prices: names no price: give input_per_mtok and output_per_mtok (e.g. {"input_per_mtok": 3, "output_per_mtok": 15}), or omit prices`,
		`$.models.sonnet.prices.input_per_mtok: must be a price in US dollars per million tokens, 0 or more (e.g. 3.5)`,
		`$.agents["agent-1"].budgets.per_job_tokens: must be 0 or more (0 or omitted: no cap), e.g. "per_job_tokens": 500000`,
		`$.agents["agent-1"].budgets.per_day_cost_usd: must be 0 or more (0 or omitted: no cap), e.g. "per_day_cost_usd": 2.5`,
	})
}

// TestCapsParseFlatInBudgets reads the caps from the budgets object, and
// refuses a misspelt one by name.
func TestCapsParseFlatInBudgets(t *testing.T) {
	t.Parallel()
	var b config.Budgets
	if err := strictjson.Decode([]byte(`{"max_core_jobs": 2, "per_day_cost_usd": 5, "per_job_tokens": 1000}`), &b, strictjson.Limits{}); err != nil {
		t.Fatal(err)
	}
	if b.PerDayCostUSD != 5 || b.PerJobTokens != 1000 || b.MaxCoreJobs != 2 {
		t.Errorf("budgets = %+v", b)
	}
	err := strictjson.Decode([]byte(`{"per_day_cost": 5}`), &b, strictjson.Limits{})
	if err == nil || !strings.Contains(err.Error(), "per_day_cost") {
		t.Errorf("a misspelt cap: err = %v, want it named", err)
	}
}

// TestHostCapsParseStrictlyAndValidate reads the host-wide caps from the
// top-level caps object, refuses a misspelt one by name and a negative
// one with its JSON path and an example.
func TestHostCapsParseStrictlyAndValidate(t *testing.T) {
	t.Parallel()
	var c config.Config
	if err := strictjson.Decode([]byte(`{"caps": {"host_per_day_usd": 20, "host_per_day_tokens": 1000000}}`), &c, strictjson.Limits{}); err != nil {
		t.Fatal(err)
	}
	if c.Caps.HostPerDayUSD != 20 || c.Caps.HostPerDayTokens != 1_000_000 {
		t.Errorf("caps = %+v", c.Caps)
	}
	err := strictjson.Decode([]byte(`{"caps": {"host_per_day_dollars": 20}}`), &c, strictjson.Limits{})
	if err == nil || !strings.Contains(err.Error(), "host_per_day_dollars") {
		t.Errorf("a misspelt host cap: err = %v, want it named", err)
	}
	cfg, s := specConfig(t), specSecrets()
	cfg.Caps = config.HostCaps{HostPerDayUSD: -1, HostPerDayTokens: -2}
	checkProblems(t, problems(t, cfg.Validate(s)), []string{
		`$.caps.host_per_day_usd: must be 0 or more (0 or omitted: no cap), e.g. "host_per_day_usd": 20`,
		`$.caps.host_per_day_tokens: must be 0 or more (0 or omitted: no cap), e.g. "host_per_day_tokens": 50000000`,
	})
}
