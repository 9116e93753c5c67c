package memory

import "testing"

// TestWordStatsWithoutStatistics gives empty rarity classes, never nil,
// when the store has no statistics for the query's words: a NULL array
// would make every full-text score NULL.
func TestWordStatsWithoutStatistics(t *testing.T) {
	tt := (&Store{}).wordStats([]string{"a"}, nil)
	if tt.Find == nil || tt.Rare == nil || tt.Uncommon == nil || tt.Common == nil {
		t.Errorf("nil class in %+v", tt)
	}
}
