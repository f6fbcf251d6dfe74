package batonhttp

import (
	"strconv"
	"strings"
)

// prefersHTML reports whether the Accept header values rank text/html
// above application/json, as a browser's do ("text/html,...,*/*;q=0.8").
// Each type's quality comes from its most specific matching range (RFC
// 9110, 12.5.1). On a tie, HTML wins only if text/html is listed by name
// before application/json (or json is not named); so a missing header,
// "*/*" (curl) and "application/json, text/html" all get JSON.
func prefersHTML(accept []string) bool {
	var ranges []mediaRange
	for _, v := range accept {
		for part := range strings.SplitSeq(v, ",") {
			if r, ok := parseRange(part); ok {
				ranges = append(ranges, r)
			}
		}
	}
	qh, ih := quality(ranges, "text", "html")
	qj, ij := quality(ranges, "application", "json")
	switch {
	case qh != qj:
		return qh > qj
	case qh == 0:
		return false
	default: // a tie: the one named first wins; JSON if neither is named
		return ih >= 0 && (ij < 0 || ih < ij)
	}
}

// mediaRange is one element of an Accept header.
type mediaRange struct {
	typ, sub string // lower case; "*" for a wildcard
	q        float64
}

// parseRange parses "type/subtype;param=v;q=0.5"; it reports false for
// an element that is not a media range, which is then ignored.
func parseRange(s string) (mediaRange, bool) {
	params := strings.Split(s, ";")
	typ, sub, ok := strings.Cut(strings.ToLower(strings.TrimSpace(params[0])), "/")
	if !ok || typ == "" || sub == "" || (typ == "*" && sub != "*") {
		return mediaRange{}, false
	}
	r := mediaRange{typ: typ, sub: sub, q: 1}
	for _, p := range params[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(strings.TrimSpace(k), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || q < 0 || q > 1 {
				return mediaRange{}, false
			}
			r.q = q
		}
	}
	return r, true
}

// quality returns the quality of typ/sub under ranges, and the index of
// the range that names it exactly (-1 if only a wildcard or nothing
// matches).
func quality(ranges []mediaRange, typ, sub string) (q float64, named int) {
	best, named := -1, -1 // specificity of the best match: 0 */*, 1 typ/*, 2 typ/sub
	for i, r := range ranges {
		spec := -1
		switch {
		case r.typ == typ && r.sub == sub:
			spec = 2
			if named < 0 {
				named = i
			}
		case r.typ == typ && r.sub == "*":
			spec = 1
		case r.typ == "*":
			spec = 0
		}
		if spec > best {
			best, q = spec, r.q
		}
	}
	return q, named
}
