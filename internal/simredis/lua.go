package simredis

import (
	"math"
	"strconv"
	"strings"
	"unsafe"
)

// What the scripts get from Lua 5.1 as Redis embeds it: numbers, their
// formatting, and the few string patterns they match, each as a function
// named after its pattern.

// Error is an error reply, as Redis sends it: "BATONFOREIGN ...",
// "WRONGTYPE ...". A script's Redis call that fails ends the script with
// that error (Redis adds the script and line, which the model leaves out).
type Error string

func (e Error) Error() string { return string(e) }

// raised carries an Error out of a script as Lua's error() does; Eval and
// Do turn it back into an error value.
type raised struct{ err Error }

func raise(e Error) { panic(raised{e}) }

// errNil is a script's error on arithmetic or concatenation with nil, which
// the scripts meet only on values written from outside. Redis 7.0 replies
// to a Lua runtime error with the error's text, "user_script:<line>: ...",
// without a code of its own: the model leaves out the line.
const errNil Error = "user_script: attempt to use a nil value"

// fmt0 is string.format('%.0f', n): C rounds half to even, as strconv does.
func fmt0(n float64) string {
	if n == math.Trunc(n) && math.Abs(n) < 1<<53 && !(n == 0 && math.Signbit(n)) {
		return strconv.FormatInt(int64(n), 10)
	}
	switch {
	case math.IsInf(n, 1):
		return "inf"
	case math.IsInf(n, -1):
		return "-inf"
	case math.IsNaN(n):
		return "nan"
	}
	return strconv.FormatFloat(n, 'f', 0, 64)
}

// join is a .. ':' .. fmt0(n) (and the like, with sep), in one allocation.
func join(a, sep string, n float64) string {
	if n != math.Trunc(n) || math.Abs(n) >= 1<<53 || n == 0 && math.Signbit(n) {
		return a + sep + fmt0(n)
	}
	var b strings.Builder
	b.Grow(len(a) + len(sep) + 20)
	b.WriteString(a)
	b.WriteString(sep)
	var d [20]byte
	b.Write(strconv.AppendInt(d[:0], int64(n), 10))
	return b.String()
}

// join3 is a .. sep .. fmt0(n) .. tail, in one allocation.
func join3(a, sep string, n float64, tail string) string {
	if n != math.Trunc(n) || math.Abs(n) >= 1<<53 || n == 0 && math.Signbit(n) {
		return a + sep + fmt0(n) + tail
	}
	b := make([]byte, 0, len(a)+len(sep)+20+len(tail))
	b = append(b, a...)
	b = append(b, sep...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, tail...)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// pair is fmt0(a) .. ':' .. fmt0(b), in one allocation.
func pair(a, b float64) string {
	if !exact(a) || !exact(b) {
		return fmt0(a) + ":" + fmt0(b)
	}
	s := make([]byte, 0, 40)
	s = strconv.AppendInt(s, int64(a), 10)
	s = append(s, ':')
	s = strconv.AppendInt(s, int64(b), 10)
	return unsafe.String(unsafe.SliceData(s), len(s))
}

// exact reports whether fmt0(n) is n's integer digits.
func exact(n float64) bool {
	return n == math.Trunc(n) && math.Abs(n) < 1<<53 && !(n == 0 && math.Signbit(n))
}

// reply is a Lua number returned to Redis: an integer, truncated.
func reply(n float64) any { return int64(n) }

// pxArg is a Lua number passed as a PX or PEXPIRE argument: Redis reads it
// as an integer.
func pxArg(n float64) int64 {
	if n != math.Trunc(n) || math.IsInf(n, 0) || math.IsNaN(n) {
		raise(errNotInteger)
	}
	return int64(n)
}

// pxStr is a string passed as a PX or PEXPIRE argument.
func pxStr(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		raise(errNotInteger)
	}
	return n
}

// tonumber is Lua 5.1's tonumber(s): strtod's decimal, hexadecimal
// integers, inf and nan, with white space around.
func tonumber(s string) (float64, bool) {
	if n := len(s); n > 0 && n <= 18 { // int64 to float64 rounds as strtod does
		var x int64
		i := 0
		for ; i < n && s[i] >= '0' && s[i] <= '9'; i++ {
			x = x*10 + int64(s[i]-'0')
		}
		if i == n {
			return float64(x), true
		}
	}
	return tonumberSlow(s)
}

func tonumberSlow(s string) (float64, bool) {
	s = strings.TrimRight(strings.TrimLeft(s, " \t\n\v\f\r"), " \t\n\v\f\r")
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 {
		return 0, false
	}
	neg := strings.HasPrefix(s, "-")
	if h, ok := strings.CutPrefix(strings.ToLower(body), "0x"); ok {
		if h == "" || strings.ContainsAny(h, "_+-") {
			return 0, false
		}
		n, err := strconv.ParseUint(h, 16, 64)
		if err != nil {
			return 0, false
		}
		if neg {
			return -float64(n), true
		}
		return float64(n), true
	}
	switch strings.ToLower(body) {
	case "inf", "infinity", "nan":
	default:
		if !decimal(body) {
			return 0, false
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil && !strings.Contains(err.Error(), "range") {
		return 0, false
	}
	return n, true
}

// decimal reports whether s is digits, an optional fraction and exponent.
func decimal(s string) bool {
	i, digits := 0, 0
	for ; i < len(s) && isDigit(s[i]); i++ {
		digits++
	}
	if i < len(s) && s[i] == '.' {
		for i++; i < len(s) && isDigit(s[i]); i++ {
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := i
		for ; i < len(s) && isDigit(s[i]); i++ {
		}
		if i == j {
			return false
		}
	}
	return i == len(s)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// sub is string.sub(s, i) for i >= 1.
func sub(s string, i int) string {
	if i > len(s) {
		return ""
	}
	return s[i-1:]
}

// prefix is string.sub(s, 1, n).
func prefix(s string, n int) string {
	if n > len(s) {
		return s
	}
	return s[:n]
}

// quote is string.format('%q', s) in Lua 5.1.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\', '\n':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\r':
			b.WriteString(`\r`)
		case 0:
			b.WriteString(`\000`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// matchDigitsColon is string.match(v, '^(%d+):').
func matchDigitsColon(v string) (string, bool) {
	i := 0
	for i < len(v) && isDigit(v[i]) {
		i++
	}
	if i == 0 || i == len(v) || v[i] != ':' {
		return "", false
	}
	return v[:i], true
}

// matchColonDigits is string.match(v, ':(%d+)$').
func matchColonDigits(v string) (string, bool) {
	i := strings.LastIndexByte(v, ':')
	if i < 0 || !allDigits(v[i+1:]) {
		return "", false
	}
	return v[i+1:], true
}

// matchPair is string.match(v, '^(%d+):(%d+)$').
func matchPair(v string) (string, string, bool) {
	a, ok := matchDigitsColon(v)
	if !ok || !allDigits(v[len(a)+1:]) {
		return "", "", false
	}
	return a, v[len(a)+1:], true
}

// matchToken is string.match(val, '^(.*):(%d+)$').
func matchToken(val string) (string, string, bool) {
	i := strings.LastIndexByte(val, ':')
	if i < 0 || !allDigits(val[i+1:]) {
		return "", "", false
	}
	return val[:i], val[i+1:], true
}

// num is tonumber of digits a pattern matched.
func num(digits string) float64 {
	n, _ := tonumber(digits)
	return n
}
