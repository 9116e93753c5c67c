package memory

import (
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

// orTerms is the tsquery (in its text form) ORing lexemes, leaving out the
// common ones (in at least commonWordFreq of the table's rows), whose
// posting lists are long and which tell matches apart little, as BM25's
// inverse document frequency would weigh them. When every lexeme is common
// they are all kept, and allCommon is true.
func orTerms(lexemes []string, common map[string]bool) (terms string, allCommon bool) {
	var keep []string
	for _, l := range lexemes {
		if !common[l] {
			keep = append(keep, l)
		}
	}
	allCommon = len(keep) == 0 && len(lexemes) > 0
	if allCommon {
		keep = lexemes
	}
	quoted := make([]string, len(keep))
	for i, l := range keep {
		quoted[i] = "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(l) + "'"
	}
	return strings.Join(quoted, " | "), allCommon
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
