package fenecdb

// Names cannot be parameters, so they are written into the text; this check is the one place an
// injection could get through (clients.md §2, R3). An identifier starts with a letter (the Unicode
// Alphabetic property) or `_`, and goes on with letters, marks that belong to them, numbers and `_`.
// A field may be a path of identifiers joined by single dots.

import (
	"strings"
	"unicode"
)

func isAlphabetic(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r)
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || isAlphabetic(r):
		case i > 0 && (unicode.IsNumber(r) || unicode.IsMark(r)):
		default:
			return false
		}
	}
	return true
}

func isField(s string) bool {
	for _, part := range strings.Split(s, ".") {
		if !isIdentifier(part) {
			return false
		}
	}
	return true
}

// quoteJSON quotes a name as JSON would, for the refusals of R3.
func quoteJSON(s string) string {
	b, _ := marshalNoEscape(s)
	return string(b)
}

func checkCollection(name string) *QueryError {
	if !isIdentifier(name) {
		return refuse("invalid collection name: %s", quoteJSON(name))
	}
	return nil
}

func checkField(name string) *QueryError {
	if !isField(name) {
		return refuse("invalid field name: %s", quoteJSON(name))
	}
	return nil
}
