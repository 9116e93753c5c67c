package spend_test

import (
	"context"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/spend"
)

// BenchmarkReserveAndSettle is the ledger's part of a metered call: the
// reservation (with no cap to check, with the agent's and the host's
// day caps) and the settlement.
func BenchmarkReserveAndSettle(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  *config.Config
	}{
		{"NoCaps", &config.Config{}},
		{"AgentAndHostCaps", &config.Config{Caps: config.HostCaps{HostPerDayUSD: 1e9},
			Agents: map[string]config.Agent{"ada": {Budgets: config.Budgets{Caps: config.Caps{PerDayCostUSD: 1e9}}}}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tb := setup(b, tc.cfg)
			ctx := context.Background()
			for b.Loop() {
				r, err := tb.ledger.Reserve(ctx, tb.call("ada", 1000, 0.01))
				if err != nil {
					b.Fatal(err)
				}
				if err := tb.ledger.Settle(ctx, r, spend.Spent{Outcome: spend.OutcomeOK, Units: 10, CostUSD: 0.001}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
