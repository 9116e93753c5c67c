// Package textquery is how the memory store reads a search query's text
// for full-text search: the words, phrases and exclusions a person typed
// (as web search reads them), the tsquery that ORs the words, and which
// words find matches through the index and how much each weighs by its
// rarity. It is pure: the statistics come from the caller.
package textquery

import (
	"cmp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Split splits a search query into what full-text search requires
// (its quoted phrases and -words, as web search reads them), its phrases
// alone, and its loose words, which hybrid and text search OR together
// (and with the phrases, so that beside a phrase they rank its matches
// without filtering them): a natural question
// ("what did Ana say about the trip?") then matches the chunks that hold
// any of its words, ranked by how well they match, instead of only those
// holding every one of them.
func Split(text string) (required, phrases, loose string) {
	var req, phr, words []string
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"':
			end := strings.IndexByte(text[i+1:], '"')
			if end < 0 {
				end = len(text) - i - 1
			}
			if phrase := strings.TrimSpace(text[i+1 : i+1+end]); phrase != "" {
				req = append(req, `"`+phrase+`"`)
				phr = append(phr, `"`+phrase+`"`)
			}
			i += end + 2
		default:
			end := strings.IndexAny(text[i:], " \t\n\r\"")
			if end < 0 {
				end = len(text) - i
			}
			tok := text[i : i+end]
			if len(tok) > 1 && tok[0] == '-' {
				req = append(req, tok)
			} else if !strings.EqualFold(tok, "or") {
				words = append(words, tok)
			}
			i += end
		}
	}
	return strings.Join(req, " "), strings.Join(phr, " or "), strings.Join(words, " ")
}

// OrQuery is the tsquery text ORing lexemes, each quoted.
func OrQuery(lexemes []string) string {
	quoted := make([]string, len(lexemes))
	for i, l := range lexemes {
		quoted[i] = quoteLexeme(l)
	}
	return strings.Join(quoted, " | ")
}

// quoteLexeme is the text of a tsquery matching lexeme alone, quoted so
// that no character of it is read as an operator.
func quoteLexeme(lexeme string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(lexeme) + "'"
}

// Rarity classes of a query word, by the share of the store's documents
// holding it (see the MemorySearchText query): under rareShare it is rare, under
// uncommonShare uncommon, under commonShare common, else it weighs least.
const (
	rareShare     = 0.01
	uncommonShare = 0.05
	commonShare   = 0.2
)

// Stat is a query word (Lexeme) and how many of the store's documents
// hold it (Docs).
type Stat struct {
	Lexeme string
	Docs   int64
}

// Terms are what the full-text side does with a query's words: Find
// holds the tsqueries of those that find matches through the RUM index,
// the rarest first while their matches stay within the budget; Rare,
// Uncommon and Common are the words of each rarity class; Partial is true
// when some word was left out of Find.
type Terms struct {
	Find, Rare, Uncommon, Common []string
	Partial                      bool
}

// Rank sorts a query's words for the full-text side: each into its
// rarity class among docs documents, and the rarest into find while the
// matches of those found so far add up to at most budget (a RUM scan costs
// about a microsecond a match: a word in half of 100,000 chunks would cost
// 25 ms, and rank little). The words left out still rank what the others,
// the newest chunks (a wider window of them then: see TextRecentWide) and
// the vector side bring.
func Rank(terms []Stat, docs int64, budget int) Terms {
	// Empty, not nil: a NULL array would make every score NULL.
	t := Terms{Find: []string{}, Rare: []string{}, Uncommon: []string{}, Common: []string{}}
	n := float64(max(docs, 1))
	byDocs := slices.Clone(terms)
	slices.SortStableFunc(byDocs, func(a, b Stat) int { return cmp.Compare(a.Docs, b.Docs) })
	var postings int64
	for _, w := range byDocs {
		share := float64(w.Docs) / n
		switch {
		case share < rareShare:
			t.Rare = append(t.Rare, w.Lexeme)
		case share < uncommonShare:
			t.Uncommon = append(t.Uncommon, w.Lexeme)
		case share < commonShare:
			t.Common = append(t.Common, w.Lexeme)
		}
		if postings += w.Docs; postings <= int64(budget) {
			t.Find = append(t.Find, quoteLexeme(w.Lexeme))
		} else {
			t.Partial = true
		}
	}
	return t
}

// Truncate cuts text to at most limit bytes, at a character boundary, and
// reports whether it did.
func Truncate(text string, limit int) (string, bool) {
	if len(text) <= limit {
		return text, false
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return strings.TrimSpace(text[:cut]), true
}
