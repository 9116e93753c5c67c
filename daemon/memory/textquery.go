package memory

import (
	"cmp"
	"slices"
	"strings"
	"unicode/utf8"
)

// splitText splits a search query into what full-text search requires
// (its quoted phrases and -words, as web search reads them), its phrases
// alone, and its loose words, which hybrid and text search OR together
// (and with the phrases, so that beside a phrase they rank its matches
// without filtering them): a natural question
// ("what did Ana say about the trip?") then matches the chunks that hold
// any of its words, ranked by how well they match, instead of only those
// holding every one of them.
func splitText(text string) (required, phrases, loose string) {
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

// orQuery is the tsquery text ORing lexemes, each quoted.
func orQuery(lexemes []string) string {
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
// holding it (see MemorySearchText): under rareShare it is rare, under
// uncommonShare uncommon, under commonShare common, else it weighs least.
const (
	rareShare     = 0.01
	uncommonShare = 0.05
	commonShare   = 0.2
)

// termStat is a query word (lexeme) and how many of the store's docs
// documents hold it.
type termStat struct {
	lexeme string
	docs   int64
}

// textTerms are what the full-text side does with a query's words: find
// holds the tsqueries of those that find matches through the RUM index,
// the rarest first while their matches stay within the budget; rare,
// uncommon and common are the words of each rarity class; partial is true
// when some word was left out of find.
type textTerms struct {
	find, rare, uncommon, common []string
	partial                      bool
}

// rankTerms sorts a query's words for the full-text side: each into its
// rarity class among docs documents, and the rarest into find while the
// matches of those found so far add up to at most budget (a RUM scan costs
// about a microsecond a match: a word in half of 100,000 chunks would cost
// 25 ms, and rank little). The words left out still rank what the others,
// the newest chunks (a wider window of them then: see TextRecentWide) and
// the vector side bring.
func rankTerms(terms []termStat, docs int64, budget int) textTerms {
	// Empty, not nil: a NULL array would make every score NULL.
	t := textTerms{find: []string{}, rare: []string{}, uncommon: []string{}, common: []string{}}
	n := float64(max(docs, 1))
	byDocs := slices.Clone(terms)
	slices.SortStableFunc(byDocs, func(a, b termStat) int { return cmp.Compare(a.docs, b.docs) })
	var postings int64
	for _, w := range byDocs {
		share := float64(w.docs) / n
		switch {
		case share < rareShare:
			t.rare = append(t.rare, w.lexeme)
		case share < uncommonShare:
			t.uncommon = append(t.uncommon, w.lexeme)
		case share < commonShare:
			t.common = append(t.common, w.lexeme)
		}
		if postings += w.docs; postings <= int64(budget) {
			t.find = append(t.find, quoteLexeme(w.lexeme))
		} else {
			t.partial = true
		}
	}
	return t
}

// truncateQuery cuts text to at most MaxQueryBytes, at a character
// boundary, and reports whether it did.
func truncateQuery(text string) (string, bool) {
	if len(text) <= MaxQueryBytes {
		return text, false
	}
	cut := MaxQueryBytes
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return strings.TrimSpace(text[:cut]), true
}
