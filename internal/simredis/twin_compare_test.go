package simredis

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// clocks compares values derived from TIME on the real server with the
// model's, which ran on the clock read from the server just before (see
// twin_test.go). A value is time-derived when it is a run of at least 13
// digits: 16 and more are µs (fences), 13 to 15 ms (deadlines, expiry
// times). Shorter runs (leases, positions, limits) must be equal.
type clocks struct {
	// fence pairs, real to model and back, each seen pair once; byReal
	// is every pair sorted by its real value.
	toModel, toReal map[int64]int64
	byReal          []int64
	// ms pairs seen (model, real); msReal the real value last paired with
	// a model one, to name a queue entry on the real server (entryArg).
	ms     map[[2]int64]bool
	msReal map[int64]int64

	// This step's bracket: the real script ran between the model's clock
	// t0 (µs) and t1.
	t0, t1 int64
	maxLag int64   // the longest bracket so far, in ms (for durations)
	lags   []int64 // recent brackets: pairs of t0 (ms) and bracket (ms)
}

// record records this step's bracket.
func (c *clocks) record() {
	b := c.t1/1000 - c.t0/1000 + 1
	c.maxLag = max(c.maxLag, b)
	c.lags = append(c.lags, c.t0/1000, b)
}

// recentLag is the longest bracket of the steps of the last 10 s (ms): no
// time point of the state (an expiry, a deadline) that a step can reach
// now was made earlier (leases, queues and hashes live a few s; markers
// and instance records an hour and more).
func (c *clocks) recentLag(now int64) int64 {
	i := 0
	for i < len(c.lags) && c.lags[i] < now-10000 {
		i += 2
	}
	c.lags = c.lags[i:]
	lag := int64(0)
	for j := 1; j < len(c.lags); j += 2 {
		lag = max(lag, c.lags[j])
	}
	return lag
}

func newClocks() *clocks {
	return &clocks{toModel: map[int64]int64{}, toReal: map[int64]int64{}, ms: map[[2]int64]bool{}, msReal: map[int64]int64{}}
}

// fence checks a fence pair: one real fence always stands for one model
// fence and back, in the same order; a new pair's real value lies within
// the step's bracket above the model's (the real script read TIME later).
func (c *clocks) fence(r, m int64) error {
	if mm, ok := c.toModel[r]; ok {
		if mm != m {
			return fmt.Errorf("real fence %d stands for model fence %d, here for %d", r, mm, m)
		}
		return nil
	}
	if rr, ok := c.toReal[m]; ok {
		return fmt.Errorf("model fence %d stands for real fence %d, here for %d", m, rr, r)
	}
	derived := c.toModel[r+1] == m+1 && c.toReal[m+1] == r+1 || c.toModel[r-1] == m-1 && c.toReal[m-1] == r-1
	if d := r - m; !derived && (d < 0 || d > c.t1-c.t0) { // derived: one off a known fence (last + 1, ElectRead's "the fence before")
		return fmt.Errorf("fence: real %d - model %d = %d µs, outside this step's bracket [0, %d]", r, m, d, c.t1-c.t0)
	}
	i := sort.Search(len(c.byReal), func(i int) bool { return c.byReal[i] > r })
	if i > 0 && c.toModel[c.byReal[i-1]] >= m {
		return fmt.Errorf("fence order: real %d > %d but model %d <= %d", r, c.byReal[i-1], m, c.toModel[c.byReal[i-1]])
	}
	if i < len(c.byReal) && c.toModel[c.byReal[i]] <= m {
		return fmt.Errorf("fence order: real %d < %d but model %d >= %d", r, c.byReal[i], m, c.toModel[c.byReal[i]])
	}
	c.toModel[r], c.toReal[m] = m, r
	c.byReal = slices.Insert(c.byReal, i, r)
	return nil
}

// millis checks a pair of ms times: seen before (carried over), or made
// in this step from the two clocks (rounding half to even may add one).
func (c *clocks) millis(r, m int64) error {
	if r == m || c.ms[[2]int64{m, r}] {
		c.msReal[m] = r
		return nil
	}
	lag := c.t1/1000 - c.t0/1000 + 1
	if d := r - m; d < 0 || d > lag {
		return fmt.Errorf("ms time: real %d - model %d = %d ms, outside this step's bracket [0, %d]", r, m, d, lag)
	}
	c.ms[[2]int64{m, r}] = true
	c.msReal[m] = r
	return nil
}

// relative checks a duration (PTTL, a wait): within the lag of the two
// clocks when its deadline was made and now.
func (c *clocks) relative(r, m int64) error {
	if d := r - m; d < -c.maxLag-2 || d > c.maxLag+2 {
		return fmt.Errorf("duration: real %d ms, model %d ms", r, m)
	}
	return nil
}

// number compares two integers by their size: µs, ms or exact.
func (c *clocks) number(r, m int64) error {
	switch {
	case r >= 1e15 || m >= 1e15:
		return c.fence(r, m)
	case r >= 1e12 || m >= 1e12:
		return c.millis(r, m)
	case r != m:
		return fmt.Errorf("real %d, model %d", r, m)
	}
	return nil
}

// text compares two strings run by run of digits.
func (c *clocks) text(r, m string) error {
	rt, mt := runs(r), runs(m)
	if len(rt) != len(mt) {
		return fmt.Errorf("real %q, model %q", r, m)
	}
	for i := range rt {
		if rt[i] == "" || mt[i] == "" || !isDigit(rt[i][0]) || !isDigit(mt[i][0]) || len(rt[i]) < 13 && len(mt[i]) < 13 {
			if rt[i] != mt[i] {
				return fmt.Errorf("real %q, model %q", r, m)
			}
			continue
		}
		rn, err1 := strconv.ParseInt(rt[i], 10, 64)
		mn, err2 := strconv.ParseInt(mt[i], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("real %q, model %q", r, m)
		}
		if err := c.number(rn, mn); err != nil {
			return fmt.Errorf("real %q, model %q: %w", r, m, err)
		}
	}
	return nil
}

// runs splits s into maximal runs of digits and of other bytes.
func runs(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := i + 1
		for j < len(s) && isDigit(s[j]) == isDigit(s[i]) {
			j++
		}
		out = append(out, s[i:j])
		i = j
	}
	if len(out) == 0 {
		out = append(out, "")
	}
	return out
}

// reply compares a script's replies; rel lists the positions of a top
// array that hold durations.
func (c *clocks) reply(r, m any, rel []int) error {
	switch m := m.(type) {
	case nil:
		if r != nil {
			return fmt.Errorf("real %#v, model nil", r)
		}
	case int64:
		rv, ok := r.(int64)
		if !ok {
			return fmt.Errorf("real %#v, model %d", r, m)
		}
		return c.number(rv, m)
	case string:
		rv, ok := r.(string)
		if !ok {
			return fmt.Errorf("real %#v, model %q", r, m)
		}
		return c.text(rv, m)
	case []any:
		rv, ok := r.([]any)
		if !ok || len(rv) != len(m) {
			return fmt.Errorf("real %#v, model %#v", r, m)
		}
		for i := range m {
			var err error
			if slices.Contains(rel, i) {
				rn, ok1 := rv[i].(int64)
				mn, ok2 := m[i].(int64)
				if !ok1 || !ok2 {
					return fmt.Errorf("[%d]: real %#v, model %#v", i, rv[i], m[i])
				}
				err = c.relative(rn, mn)
			} else {
				err = c.reply(rv[i], m[i], nil)
			}
			if err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	default:
		return fmt.Errorf("model reply of type %T", m)
	}
	return nil
}

// sameError compares error replies: baton's own exactly, Redis's by code
// (Redis adds the script and line to a failed command's error).
func sameError(r, m error) bool {
	if r == nil || m == nil {
		return r == nil && m == nil
	}
	rs, ms := r.Error(), m.Error()
	if strings.HasPrefix(ms, "BATON") {
		return rs == ms
	}
	rc, _, _ := strings.Cut(rs, " ")
	mc, _, _ := strings.Cut(ms, " ")
	if strings.HasPrefix(mc, "user_script:") {
		// A Lua runtime error: its "code" is the script's line.
		return strings.HasPrefix(rc, "user_script:")
	}
	return rc == mc
}
