package admin

import (
	"errors"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true},
		{"*", "a/b", true},
		{"a*", "a", true},
		{"a*b", "axxb", true},
		{"a*b", "axxbc", false},
		{"a*b*c", "abxbxc", true},
		{"**a", "ba", true},
		{"?", "", false},
		{"?", "é", false}, // bytes, as Redis
		{"??", "é", true},
		{"[abc]", "b", true},
		{"[abc]", "d", false},
		{"[^abc]", "d", true},
		{"[^abc]", "a", false},
		{"[a-c]x", "bx", true},
		{"[c-a]x", "bx", true}, // ranges may run backwards
		{"[a-c]", "d", false},
		{`[\]]`, "]", true},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`a\`, `a\`, true},
		{"[]a", "a", false}, // "]" first closes an empty class
		{"jobs/*", "jobs/x/3", true},
		{"", "", true},
		{"", "a", false},
	} {
		if got := globMatch(tc.p, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.want)
		}
	}
}

func TestCheckGlob(t *testing.T) {
	for _, p := range []string{"*", "a[bc]", `\[`, `[\]]`, "[^a-z]*"} {
		if err := checkGlob(p); err != nil {
			t.Errorf("checkGlob(%q): %v", p, err)
		}
	}
	for _, p := range []string{"[", "a[bc", `a\`, `[\]`, "[a-"} {
		if err := checkGlob(p); !errors.Is(err, ErrInvalidPattern) {
			t.Errorf("checkGlob(%q): %v, want ErrInvalidPattern", p, err)
		}
	}
}

func TestQuoteGlob(t *testing.T) {
	for _, s := range []string{"baton", "a*b", `[x]?\`} {
		if q := quoteGlob(s); !globMatch(q, s) || globMatch(q, s+"x") {
			t.Errorf("quoteGlob(%q) = %q does not match exactly it", s, q)
		}
	}
}

func TestSetValue(t *testing.T) {
	const m = "0123456789abcdef0123456789abcdef-7"
	for _, tc := range []struct {
		v                     string
		exists                bool
		held, marker, foreign bool
		fence                 uint64
	}{
		{"", false, false, false, false, 0},
		{m + ":1700000000000000", true, true, false, false, 1700000000000000},
		{"~42", true, false, true, false, 42},
		{"", true, false, false, true, 0},
		{"~", true, false, false, true, 0},
		{"~4x", true, false, false, true, 0},
		{m + ":", true, false, false, true, 0},
		{"xyz-1:5", true, false, false, true, 0},
		{"abc:5", true, false, false, true, 0},
		{"abc-:5", true, false, false, true, 0},
		{"hello", true, false, false, true, 0},
	} {
		var n Name
		n.setValue(tc.v, tc.exists)
		if n.Held != tc.held || n.Marker != tc.marker || n.Foreign != tc.foreign || n.Fence != tc.fence || n.Token != tc.fence<<10 {
			t.Errorf("setValue(%q, %v) = %+v", tc.v, tc.exists, n)
		}
		if tc.held && (n.Owner != tc.v || n.Member() != m) {
			t.Errorf("setValue(%q): Owner %q, Member %q", tc.v, n.Owner, n.Member())
		}
	}
}
