package simredis

import (
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/script"
)

// The model's own rules, without a real server (TestTwin proves them
// against one).

const (
	member0 = "ababababababababababababababab00-1"
	member1 = "ababababababababababababababab01-1"
)

var lockKeys = []string{"tw:{a}", "tw:{a}:q"}

func acquireArgs(member string) []string {
	return []string{member, "1000", "1", "C:tw", "a", "C:tw"}
}

func invalidations(s *Server) []string {
	var out []string
	for _, d := range s.Drain(nil) {
		if d.Kind == Invalidate {
			k := d.Key
			if d.Flush {
				k = "<flush>"
			}
			out = append(out, string(rune('0'+d.To))+" "+k)
		}
	}
	return out
}

func TestTrackedKeysInvalidatedByAnotherConnection(t *testing.T) {
	s := New(Options{})
	s.SetTime(time.UnixMilli(1_800_000_000_000))
	s.Connect(1, true)
	s.Connect(2, true)
	// A tracked busy attempt reads the key (GET, PTTL): Redis 7.0 tracks
	// both declared keys.
	if _, err := s.Eval(2, script.Acquire, lockKeys, acquireArgs(member1), false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(1, script.Acquire, lockKeys, acquireArgs(member0), true); err != nil {
		t.Fatal(err)
	}
	s.Drain(nil)
	s.Del(lockKeys...)
	if got, want := invalidations(s), []string{"1 tw:{a}", "1 tw:{a}:q"}; !slices.Equal(got, want) {
		t.Fatalf("invalidations %q, want %q", got, want)
	}
	s.Set(lockKeys[0], "~1", time.Hour)
	if got := invalidations(s); len(got) != 0 {
		t.Fatalf("a key is told once, then tracked no more: %q", got)
	}
}

func TestOwnWriteEndsTrackingUntold(t *testing.T) {
	s := New(Options{})
	s.SetTime(time.UnixMilli(1_800_000_000_000))
	s.Connect(1, true)
	// The fast path reads the key and writes it: the write ends the
	// tracking of the key (NOLOOP: untold), the queue stays tracked.
	s.Set(lockKeys[0], "~5", time.Hour)
	if _, err := s.Eval(1, script.Acquire, lockKeys, acquireArgs(member0), true); err != nil {
		t.Fatal(err)
	}
	if got := invalidations(s); len(got) != 0 {
		t.Fatalf("own write told: %q", got)
	}
	s.Del(lockKeys[0])
	s.Do(Outside, "RPUSH", lockKeys[1], "x")
	if got, want := invalidations(s), []string{"1 tw:{a}:q"}; !slices.Equal(got, want) {
		t.Fatalf("invalidations %q, want %q", got, want)
	}
}

func TestExpiryTellsTrackersWhenTheClockPassesIt(t *testing.T) {
	s := New(Options{})
	start := time.UnixMilli(1_800_000_000_000)
	s.SetTime(start)
	s.Connect(1, true)
	if _, err := s.Eval(Outside, script.Acquire, lockKeys, acquireArgs(member1), false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(1, script.Acquire, lockKeys, []string{member0, "1000", "0", "C:tw", "a", "C:tw"}, true); err != nil {
		t.Fatal(err)
	}
	s.Drain(nil)
	s.SetTime(start.Add(1000 * time.Millisecond)) // now == expiry: still there
	if s.PTTL(lockKeys[0]) != 0 || len(invalidations(s)) != 0 {
		t.Fatalf("key gone at its expiry ms: PTTL %d", s.PTTL(lockKeys[0]))
	}
	s.SetTime(start.Add(1001 * time.Millisecond))
	if got, want := invalidations(s), []string{"1 tw:{a}"}; !slices.Equal(got, want) {
		t.Fatalf("invalidations %q, want %q", got, want)
	}
}

func TestFlushAllTellsEveryTrackingConnection(t *testing.T) {
	s := New(Options{})
	s.Connect(1, true)
	s.Connect(2, false)
	s.Connect(3, true)
	if _, err := s.Do(3, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if got, want := invalidations(s), []string{"1 <flush>", "3 <flush>"}; !slices.Equal(got, want) {
		t.Fatalf("invalidations %q, want %q", got, want)
	}
}

func TestPublishCountsSubscribedConnections(t *testing.T) {
	s := New(Options{})
	s.SetTime(time.UnixMilli(1_800_000_000_000))
	s.Connect(1, false)
	s.Subscribe(1, "tw:c:"+member1[:32])
	for _, m := range []string{member0, member1} {
		if _, err := s.Eval(Outside, script.Acquire, lockKeys, acquireArgs(m), false); err != nil {
			t.Fatal(err)
		}
	}
	v, _ := s.Get(lockKeys[0])
	res, err := s.Eval(Outside, script.Release, lockKeys, []string{v, member0, "1000", "0", "C:tw", "a", "250"}, false)
	if err != nil || !slices.Equal(res.([]any), []any{int64(1), int64(0)}) {
		t.Fatalf("release with a listening grantee: %v %v", res, err)
	}
	s.Drop(1)
	v, _ = s.Get(lockKeys[0])
	if _, err := s.Eval(Outside, script.Acquire, lockKeys, acquireArgs(member0), false); err != nil {
		t.Fatal(err)
	}
	res, err = s.Eval(Outside, script.Release, lockKeys, []string{v, member1, "1000", "0", "C:tw", "a", "250"}, false)
	if err != nil || !slices.Equal(res.([]any), []any{int64(0)}) {
		t.Fatalf("release with a grantee nobody hears: %v %v", res, err)
	}
}

func TestForeignValueIsBatonsError(t *testing.T) {
	s := New(Options{})
	s.Set(lockKeys[0], "x\"y\n", 0)
	_, err := s.Eval(Outside, script.Acquire, lockKeys, acquireArgs(member0), false)
	if err == nil || err.Error() != `BATONFOREIGN "x\"y\`+"\n"+`"` {
		t.Fatalf("error %v", err)
	}
	s.Do(Outside, "DEL", lockKeys[0])
	s.Do(Outside, "RPUSH", lockKeys[0], "x")
	if _, err := s.Eval(Outside, script.Acquire, lockKeys, acquireArgs(member0), false); err == nil || err.Error() != "BATONFOREIGN <list>" {
		t.Fatalf("a key of another type: error %v", err)
	}
}

func TestFormatRoundsHalfToEven(t *testing.T) {
	for _, c := range []struct {
		n    float64
		want string
	}{{1200.5, "1200"}, {1201.5, "1202"}, {-0.5, "-0"}, {1796402143808891, "1796402143808891"}} {
		if got := fmt0(c.n); got != c.want {
			t.Errorf("fmt0(%v) = %q, want %q", c.n, got, c.want)
		}
	}
}
