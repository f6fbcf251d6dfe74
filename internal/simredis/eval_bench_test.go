package simredis

import (
	"strconv"
	"testing"
	"time"
	"unsafe"

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
// general path: the cache mark read, head of an empty queue, fence, SET).
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
		s.Del(keys[0])
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

// BenchmarkAcquireMarked is one Acquire of a name whose key is gone while
// another session's cache mark holds it (busy: the mark read, the queue's
// head pruned, the caller's entry rewritten in place, the PTTL of the mark).
func BenchmarkAcquireMarked(b *testing.B) {
	s := New(Options{})
	s.SetTime(time.Now())
	s.Connect(1, false)
	keys := []string{"tw:{a}", "tw:{a}:q"}
	s.Set(keys[0]+":c", "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcd01-1:1", time.Hour)
	args := []string{benchMember, "3000", "1", "C:tw", "a", "C:tw"}
	b.ReportAllocs()
	for b.Loop() {
		res, err := s.Eval(1, script.Acquire, keys, args, false)
		if err != nil {
			b.Fatal(err)
		}
		if l, ok := res.([]any); !ok || l[0] != int64(0) {
			b.Fatalf("acquire: %v", res)
		}
	}
}

// BenchmarkReleaseCache is one Release in mode "k" of a cached hold,
// marked: the mark deleted and written again with the key's lease.
func BenchmarkReleaseCache(b *testing.B) {
	s := New(Options{})
	s.SetTime(time.Now())
	s.Connect(1, true)
	keys := []string{"tw:{a}", "tw:{a}:q"}
	if _, err := s.Eval(1, script.Acquire, keys, []string{benchMember, "3000", "1", "C:tw", "a", "C:tw"}, false); err != nil {
		b.Fatal(err)
	}
	v, _ := s.Get(keys[0])
	args := []string{v, benchMember, "3000", "k", "C:tw", "a", "250", "1"}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := s.Eval(1, script.Release, keys, args, true); err != nil || res != int64(4) {
			b.Fatalf("release: %v %v", res, err)
		}
	}
}

// BenchmarkReleaseUnheard is one Release (mode "0") whose queue holds
// three live sessions that cannot hear a grant: each is granted and
// passed over, and the key becomes a free marker; the queue is put back
// between calls.
func BenchmarkReleaseUnheard(b *testing.B) {
	s := New(Options{})
	s.SetTime(time.Now())
	s.Connect(1, false)
	keys := []string{"tw:{a}", "tw:{a}:q"}
	dl := strconv.FormatInt(s.Time().UnixMilli()+60000, 10)
	var q []string
	for i := range 3 {
		q = append(q, "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcd0"+strconv.Itoa(i)+"-1|"+dl+"|3000")
	}
	token := benchMember + ":1796402143808891"
	args := []string{token, benchMember, "3000", "0", "C:tw", "a", "250", "0"}
	push := append([]string{"RPUSH", keys[1]}, q...)
	b.ReportAllocs()
	for b.Loop() {
		s.Set(keys[0], token, time.Minute) // in place: no allocation
		s.Do(Outside, push...)
		if res, err := s.Eval(1, script.Release, keys, args, false); err != nil {
			b.Fatalf("release: %v %v", res, err)
		}
	}
}

// BenchmarkSemReleaseGrant is one contended SemRelease of a plain
// semaphore of one permit: two slots take turns, each releasing in mode
// "2" (linger), which grants the permit to the other, queued, and queues
// it again (the hand-off fast path).
func BenchmarkSemReleaseGrant(b *testing.B) {
	s := New(Options{})
	s.SetTime(time.Now())
	a, c := "ababababababababababababababab00-1.0", "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcd01-1.0"
	s.Connect(1, false)
	s.Connect(2, false)
	s.Subscribe(1, "tw:c:"+a[:32])
	s.Subscribe(2, "tw:c:"+c[:32])
	keys := []string{"tw:s:{s}", "tw:s:{s}:q"}
	for i, m := range []string{a, c} {
		if _, err := s.Eval(ClientID(i+1), script.SemAcquire, keys, []string{m, "3000", "1", "C:tw", "s", "1"}, false); err != nil {
			b.Fatal(err)
		}
	}
	args := []string{"", "", "3000", "2", "C:tw", "s", "60000", "1", ""}
	var out []Delivery
	b.ReportAllocs()
	buf := make([]byte, 0, 64)
	for b.Loop() {
		h := s.keys[keys[0]]
		holder, id := a, ClientID(1)
		if h.fieldAt(a) < 0 {
			holder, id = c, 2
		}
		fe, _ := matchDigitsColon(h.hash[h.fieldAt(holder)].val)
		buf = append(append(append(buf[:0], holder...), ':'), fe...)
		args[0], args[1] = unsafe.String(unsafe.SliceData(buf), len(buf)), holder // the script keeps no argument but the member
		res, err := s.Eval(id, script.SemRelease, keys, args, false)
		if err != nil {
			b.Fatal(err)
		}
		if l, ok := res.([]any); !ok || l[0] != int64(1) {
			b.Fatalf("semrelease: %v", res)
		}
		out = s.Drain(out[:0])
	}
}

// BenchmarkRenewCached is one Renew of one cached hold (kind "c"): the
// key and its cache mark extended, the queue's length read.
func BenchmarkRenewCached(b *testing.B) {
	s := New(Options{})
	s.SetTime(time.Now())
	keys := []string{"tw:{a}", "tw:{a}:q"}
	if _, err := s.Eval(Outside, script.Acquire, keys, []string{benchMember, "3000", "1", "C:tw", "a", "C:tw"}, false); err != nil {
		b.Fatal(err)
	}
	v, _ := s.Get(keys[0])
	if res, err := s.Eval(Outside, script.Release, keys, []string{v, benchMember, "3000", "k", "C:tw", "a", "250", "0"}, false); err != nil || res != int64(4) {
		b.Fatalf("release: %v %v", res, err)
	}
	args := []string{"c", v, "3000"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Eval(Outside, script.Renew, keys[:1], args, false); err != nil {
			b.Fatal(err)
		}
	}
}
