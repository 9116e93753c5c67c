package tool

import (
	"context"
	"net/http"

	"github.com/choirhq/choir/rpc/egress"
)

// LabelServiceCall labels a request a built-in tool sends to a metered
// service route of choird's egress gateway (a search query, speech): a
// fresh spend key, the calling lane and the tool as the purpose. The
// gateway meters the call under that key; the tool puts the key in its
// usage record (usage.Record.SpendKey), so that the usage views count
// the call once. It returns the key.
func LabelServiceCall(ctx context.Context, h http.Header, toolName string) string {
	key := egress.NewSpendKey()
	h.Set(egress.HeaderSpendKey, key)
	if lane := LaneName(ctx); lane != "" {
		h.Set(egress.HeaderLane, lane)
	}
	h.Set(egress.HeaderPurpose, toolName)
	return key
}
