package textquery

import "testing"

// TestSplitText checks how a query splits into required phrases and
// -words, phrases alone, and loose words (an explicit "or" dropped).
func TestSplitText(t *testing.T) {
	for _, c := range []struct{ in, required, phrases, loose string }{
		{"what did Ana say?", "", "", "what did Ana say?"},
		{`"red car" green or yellow -blue`, `"red car" -blue`, `"red car"`, "green yellow"},
		{`"a b" "c d`, `"a b" "c d"`, `"a b" or "c d"`, ""},
		{"- dash -", "", "", "- dash -"},
		{`""`, "", "", ""},
	} {
		r, p, l := Split(c.in)
		if r != c.required || p != c.phrases || l != c.loose {
			t.Errorf("Split(%q) = %q, %q, %q; want %q, %q, %q", c.in, r, p, l, c.required, c.phrases, c.loose)
		}
	}
}
