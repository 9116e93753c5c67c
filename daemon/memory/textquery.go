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

// orQuery is the tsquery text ORing lexemes, each quoted.
func orQuery(lexemes []string) string {
	return strings.Join(quoteLexemes(lexemes), " | ")
}

// quoteLexemes returns each lexeme as the text of a tsquery matching it
// alone, quoted so that no character of it is read as an operator.
func quoteLexemes(lexemes []string) []string {
	quoted := make([]string, len(lexemes))
	for i, l := range lexemes {
		quoted[i] = "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(l) + "'"
	}
	return quoted
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
