package checker

import (
	"testing"
	"time"

	"github.com/batonlock/baton"
)

// cacheAnalysis is an analysis with two sessions s (member m1) and u (m2)
// on name "n", how the Observer reported each acquisition, and samples.
type cacheAnalysis struct {
	analysisRun
	s, u *wsession
}

func newCacheAnalysis() cacheAnalysis {
	a := newAnalysis()
	s, u := a.session("s", time.Second), a.session("u", time.Second)
	s.member, u.member = "m1", "m2"
	a.members = map[string]*wsession{"m1": s, "m2": u}
	a.hows = map[howKey]baton.How{}
	a.samples = [][]sample{nil}
	return cacheAnalysis{a, s, u}
}

// held records an acquisition (see analysisRun.hold) made how.
func (a cacheAnalysis) held(s *wsession, token uint64, how baton.How, call, acq, unlock int) *whold {
	a.hows[howKey{"n", token}] = how
	return a.hold(s, token, call, acq, unlock)
}

// read records a sample that read value from sent to sent+1, and again
// unchanged until last (ms; last <= sent: once).
func (a cacheAnalysis) read(value string, sent, last int) {
	s := sample{sent: a.at(sent), got: a.at(sent + 1), lastSent: a.at(sent), lastGot: a.at(sent + 1), value: value}
	if last > sent {
		s.lastSent, s.lastGot = a.at(last), a.at(last+1)
	}
	a.samples[0] = append(a.samples[0], s)
}

func TestWorkloadCacheCounts(t *testing.T) {
	t.Run("recall and re-caching", func(t *testing.T) {
		a := newCacheAnalysis()
		a.held(a.s, 1, baton.Free, 0, 1, 10) // released at 11, kept cached
		a.read("m1:1", 2, 20)                // read s's from 3 to 20: cached after 11
		a.held(a.u, 2, baton.Granted, 15, 25, 30)
		a.held(a.s, 3, baton.Free, 35, 40, 45)
		a.held(a.s, 4, baton.Cached, 46, 50, 55)
		a.held(a.s, 5, baton.Cached, 56, 60, 65)
		rep := a.check(t, oIdle, 0)
		if rep.Recalls != 1 || rep.Recached != 1 || rep.RecallWaitMax != 10*time.Millisecond || rep.CachedAcquisitions != 2 {
			t.Fatalf("recalls %d (max wait %v), re-cached %d, cached %d; want 1 (10ms), 1, 2",
				rep.Recalls, rep.RecallWaitMax, rep.Recached, rep.CachedAcquisitions)
		}
		if rep.Hows["granted"] != 1 || rep.Hows["cached"] != 2 || rep.Hows["free"] != 2 {
			t.Fatalf("hows %v", rep.Hows)
		}
	})
	t.Run("no read of the cached key", func(t *testing.T) {
		a := newCacheAnalysis()
		a.held(a.s, 1, baton.Free, 0, 1, 10)
		a.read("m1:1", 2, 9) // only while held
		a.held(a.u, 2, baton.Granted, 15, 25, 30)
		if rep := a.check(t, oIdle, 0); rep.Recalls != 0 {
			t.Fatalf("%d recalls without a read of the cached key", rep.Recalls)
		}
	})
	t.Run("after a burst", func(t *testing.T) {
		a := newCacheAnalysis()
		a.held(a.s, 1, baton.Free, 0, 1, 10)
		a.afterBurst = [][]sample{{{sent: a.at(12), got: a.at(13), lastSent: a.at(12), lastGot: a.at(13), value: "m1:1"}}}
		a.held(a.u, 2, baton.Granted, 15, 25, 30)
		if rep := a.check(t, oIdle, 0); rep.Recalls != 1 {
			t.Fatalf("%d recalls, want 1 (read at the end of a burst)", rep.Recalls)
		}
	})
	t.Run("a grant nobody took up", func(t *testing.T) {
		a := newCacheAnalysis()
		a.held(a.s, 1, baton.Free, 0, 1, 10)
		a.read("m1:1", 2, 20)
		a.wait(a.s, 5, 18) // s's own Lock, given up: the key may be its grant
		a.held(a.u, 2, baton.Granted, 15, 25, 30)
		if rep := a.check(t, oIdle, 0); rep.Recalls != 0 {
			t.Fatalf("%d recalls with a call of s in flight", rep.Recalls)
		}
	})
	t.Run("ran out", func(t *testing.T) {
		a := newCacheAnalysis()
		a.held(a.s, 1, baton.Free, 0, 1, 10)
		a.read("m1:1", 2, 50)
		a.read("~1", 60, 100)
		a.held(a.u, 2, baton.Free, 110, 111, 120)
		rep := a.check(t, oIdle, 0)
		if rep.CacheRanOut != 1 || rep.Recalls != 0 {
			t.Fatalf("ran out %d, recalls %d; want 1, 0", rep.CacheRanOut, rep.Recalls)
		}
		// A TryLock of u's meanwhile recalled it instead.
		a = newCacheAnalysis()
		a.held(a.s, 1, baton.Free, 0, 1, 10)
		a.read("m1:1", 2, 50)
		a.read("~1", 60, 100)
		a.calls = append(a.calls, &wcall{op: opTry, sess: a.u, start: a.at(52), end: a.at(53), kind: "not-acquired", timeout: time.Second})
		if rep := a.check(t, oIdle, 0); rep.CacheRanOut != 0 {
			t.Fatalf("ran out %d after another session's TryLock, want 0", rep.CacheRanOut)
		}
	})
}
