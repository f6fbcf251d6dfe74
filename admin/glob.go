package admin

import (
	"fmt"
	"strings"
)

// List's match is a Redis glob, as SCAN MATCH reads it: "*" matches any
// run of bytes ('/' too, unlike path.Match), "?" one byte, "[a-z]" and
// "[^a-z]" a class, and "\" quotes the next byte. Redis does the first
// filtering; globMatch repeats it on the name alone, as the key pattern
// "<prefix>:{<match>}*" also lets through names containing "}".

// checkGlob rejects the patterns Redis reads in its own lenient way (an
// unterminated class, a trailing backslash) and globMatch would read
// differently.
func checkGlob(p string) error {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i == len(p)-1 {
				return fmt.Errorf("%w: %q ends with '\\'", ErrInvalidPattern, p)
			}
			i++
		case '[':
			end := classEnd(p[i:])
			if end < 0 {
				return fmt.Errorf("%w: %q has an unterminated '['", ErrInvalidPattern, p)
			}
			i += end - 1
		}
	}
	return nil
}

// classEnd returns the length of the class at the start of p ("[...]"),
// or -1 if it is not terminated.
func classEnd(p string) int {
	i := 1
	if i < len(p) && p[i] == '^' {
		i++
	}
	for ; i < len(p); i++ {
		switch {
		case p[i] == '\\' && i+1 < len(p):
			i++
		case p[i] == ']':
			return i + 1
		case i+2 < len(p) && p[i+1] == '-':
			i += 2
		}
	}
	return -1
}

// globMatch reports whether s matches the pattern p (checked by
// checkGlob). Each token but "*" matches one byte, so one backtracking point
// (the last star) suffices and the time is O(len(p)*len(s)) at worst.
func globMatch(p, s string) bool {
	px, sx := 0, 0
	starP, starS := -1, 0
	for sx < len(s) {
		if px < len(p) {
			if p[px] == '*' {
				starP, starS = px, sx
				px++
				continue
			}
			if w, ok := matchOne(p[px:], s[sx]); ok {
				px += w
				sx++
				continue
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		px, sx = starP+1, starS
	}
	for px < len(p) && p[px] == '*' {
		px++
	}
	return px == len(p)
}

// matchOne matches the token at the start of p (not "*") against c and
// returns the token's width.
func matchOne(p string, c byte) (width int, ok bool) {
	switch p[0] {
	case '?':
		return 1, true
	case '\\':
		if len(p) > 1 {
			return 2, p[1] == c
		}
		return 1, c == '\\'
	case '[':
		return matchClass(p, c)
	}
	return 1, p[0] == c
}

// matchClass matches the class at the start of p like Redis's
// stringmatchlen: ranges may run backwards, "\" quotes, and "]" first
// closes an empty class.
func matchClass(p string, c byte) (width int, ok bool) {
	i, not, match := 1, false, false
	if i < len(p) && p[i] == '^' {
		not = true
		i++
	}
	for ; i < len(p); i++ {
		switch {
		case p[i] == '\\' && i+1 < len(p):
			i++
			match = match || p[i] == c
		case p[i] == ']':
			return i + 1, match != not
		case i+2 < len(p) && p[i+1] == '-':
			lo, hi := p[i], p[i+2]
			if lo > hi {
				lo, hi = hi, lo
			}
			match = match || (lo <= c && c <= hi)
			i += 2
		default:
			match = match || p[i] == c
		}
	}
	return len(p), false // unterminated: checkGlob refuses it
}

// quoteGlob quotes the bytes of s that a Redis glob reads specially.
func quoteGlob(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
