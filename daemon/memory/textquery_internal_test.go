package memory

import (
	"fmt"
	"testing"
)

// TestRankTerms sorts a query's words by rarity among 1,000 documents and
// lets the rarest find matches within the budget.
func TestRankTerms(t *testing.T) {
	terms := []termStat{{"broad", 500}, {"mid", 30}, {"rare", 2}, {"unseen", 0}, {"common", 100}, {"edge", 10}}
	got := rankTerms(terms, 1000, 150)
	want := textTerms{
		// Rarest first: 0, 2, 10, 30 and 100 add up to 142; 500 more would
		// pass 150.
		find:     []string{"'unseen'", "'rare'", "'edge'", "'mid'", "'common'"},
		rare:     []string{"unseen", "rare"}, // under 1%
		uncommon: []string{"edge", "mid"},    // 1% to 5%
		common:   []string{"common"},         // 5% to 20%
		partial:  true,                       // "broad" only ranks
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rankTerms = %+v\nwant %+v", got, want)
	}
	if got := rankTerms(terms[1:4], 1000, 100); got.partial {
		t.Errorf("every word within the budget, yet partial: %+v", got)
	}
	if got := rankTerms(terms, 1000, 1); fmt.Sprint(got.find) != "['unseen']" {
		t.Errorf("budget 1 finds by %v, want the word no document holds only", got.find)
	}
	// No words, or no statistics: empty classes, never nil (a NULL array
	// would make every full-text score NULL).
	for _, tt := range []textTerms{rankTerms(nil, 0, 0), (&Store{}).wordStats([]string{"a"}, nil)} {
		if tt.find == nil || tt.rare == nil || tt.uncommon == nil || tt.common == nil {
			t.Errorf("nil class in %+v", tt)
		}
	}
	// A quote in a word is escaped, not read as tsquery syntax.
	if got := rankTerms([]termStat{{"o'neil", 1}}, 10, 10).find; fmt.Sprint(got) != "['o''neil']" {
		t.Errorf("find = %v", got)
	}
}
