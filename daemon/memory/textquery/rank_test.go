package textquery

import (
	"fmt"
	"testing"
)

// TestRankTerms sorts a query's words by rarity among 1,000 documents and
// lets the rarest find matches within the budget.
func TestRankTerms(t *testing.T) {
	terms := []Stat{{"broad", 500}, {"mid", 30}, {"rare", 2}, {"unseen", 0}, {"common", 100}, {"edge", 10}}
	got := Rank(terms, 1000, 150)
	want := Terms{
		// Rarest first: 0, 2, 10, 30 and 100 add up to 142; 500 more would
		// pass 150.
		Find:     []string{"'unseen'", "'rare'", "'edge'", "'mid'", "'common'"},
		Rare:     []string{"unseen", "rare"}, // under 1%
		Uncommon: []string{"edge", "mid"},    // 1% to 5%
		Common:   []string{"common"},         // 5% to 20%
		Partial:  true,                       // "broad" only ranks
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rankTerms = %+v\nwant %+v", got, want)
	}
	if got := Rank(terms[1:4], 1000, 100); got.Partial {
		t.Errorf("every word within the budget, yet partial: %+v", got)
	}
	if got := Rank(terms, 1000, 1); fmt.Sprint(got.Find) != "['unseen']" {
		t.Errorf("budget 1 finds by %v, want the word no document holds only", got.Find)
	}
	// No words: empty classes, never nil (a NULL array
	// would make every full-text score NULL).
	for _, tt := range []Terms{Rank(nil, 0, 0)} {
		if tt.Find == nil || tt.Rare == nil || tt.Uncommon == nil || tt.Common == nil {
			t.Errorf("nil class in %+v", tt)
		}
	}
	// A quote in a word is escaped, not read as tsquery syntax.
	if got := Rank([]Stat{{"o'neil", 1}}, 10, 10).Find; fmt.Sprint(got) != "['o''neil']" {
		t.Errorf("find = %v", got)
	}
}
