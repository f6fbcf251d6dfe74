package simredis

import (
	"testing"
	"time"

	"github.com/batonlock/baton/internal/script"
)

const benchMember = "ababababababababababababababab00-1"

// BenchmarkAcquireFree is one Acquire on a free name (the free marker
// "~<fence>", the fast path); between calls the marker is put back, by
// one field write.
func BenchmarkAcquireFree(b *testing.B) {
	s := New(Options{})
	s.SetTime(time.Now())
	s.Connect(1, true)
	keys := []string{"tw:{a}", "tw:{a}:q"}
	args := []string{benchMember, "3000", "1", "C:tw", "a", "C:tw"}
	s.Set(keys[0], "~1", time.Hour)
	v := s.keys[keys[0]]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Eval(1, script.Acquire, keys, args, false); err != nil {
			b.Fatal(err)
		}
		v.str = "~1"
	}
}

// BenchmarkAcquireAbsent is one Acquire of a name without a key (the
// general path: head of an empty queue, fence, SET).
func BenchmarkAcquireAbsent(b *testing.B) {
	s := New(Options{})
	s.SetTime(time.Now())
	s.Connect(1, true)
	keys := []string{"tw:{a}", "tw:{a}:q"}
	args := []string{benchMember, "3000", "1", "C:tw", "a", "C:tw"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Eval(1, script.Acquire, keys, args, false); err != nil {
			b.Fatal(err)
		}
		delete(s.keys, keys[0])
	}
}

// BenchmarkReleaseGrant is one contended Release with a grant: two
// members of two clients take turns, each releasing in mode "1" (it has
// waiters), which grants the lock to the other, queued, and queues it
// again (the hand-off fast path with requeue).
func BenchmarkReleaseGrant(b *testing.B) {
	s := New(Options{})
	s.SetTime(time.Now())
	a, c := "ababababababababababababababab00-1", "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcd01-1"
	s.Connect(1, false)
	s.Connect(2, false)
	s.Subscribe(1, "tw:c:"+a[:32])
	s.Subscribe(2, "tw:c:"+c[:32])
	keys := []string{"tw:{a}", "tw:{a}:q"}
	if _, err := s.Eval(1, script.Acquire, keys, []string{a, "3000", "1", "C:tw", "a", "C:tw"}, false); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Eval(2, script.Acquire, keys, []string{c, "3000", "1", "C:tw", "a", "C:tw"}, false); err != nil {
		b.Fatal(err)
	}
	args := []string{"", "", "3000", "1", "C:tw", "a", "250"}
	var out []Delivery
	b.ReportAllocs()
	for b.Loop() {
		v, _ := s.Get(keys[0])
		holder, id := a, ClientID(1)
		if v[:len(c)] == c {
			holder, id = c, 2
		}
		args[0], args[1] = v, holder
		res, err := s.Eval(id, script.Release, keys, args, false)
		if err != nil {
			b.Fatal(err)
		}
		if l, ok := res.([]any); !ok || l[0] != int64(1) {
			b.Fatalf("release: %v", res)
		}
		out = s.Drain(out[:0])
	}
}

// BenchmarkRenew is one Renew of one held lock (kind "h").
func BenchmarkRenew(b *testing.B) {
	s := New(Options{})
	s.SetTime(time.Now())
	keys := []string{"tw:{a}", "tw:{a}:q"}
	res, err := s.Eval(Outside, script.Acquire, keys, []string{benchMember, "3000", "1", "C:tw", "a", "C:tw"}, false)
	if err != nil {
		b.Fatal(err)
	}
	v, _ := s.Get(keys[0])
	_ = res
	args := []string{"h", v, "3000"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Eval(Outside, script.Renew, keys[:1], args, false); err != nil {
			b.Fatal(err)
		}
	}
}
