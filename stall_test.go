package baton

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// A process stopped longer than its lease (a GC pause, a frozen VM,
// SIGSTOP) resumes with holds whose local deadline has passed: they are
// lost, and whoever asks first after the resume must hear so, before the
// renewal loop has had its turn. The tests stop a child process (the
// test binary run again, see runStallChild) past its lease, resume it,
// and the child reports what baton tells it the instant it runs again.

// stallChildEnv makes the test binary a stall child (runStallChild):
// "<mode> <redis addr> <name> <lease>".
const stallChildEnv = "BATON_TEST_STALL_CHILD"

// Stall child modes.
const (
	stallHold  = "hold"  // hold a lock and a leadership; on resume report Err, Done, Context and Held
	stallCache = "cache" // cache a lock; on resume Lock it again and report the outcome
)

// signalState is what a *Lock of the child says of itself.
type signalState struct {
	Err    string // Err(), "" if nil
	Done   bool   // Done() closed
	CtxErr string // Context().Err(), "" if nil
}

// stallReport is what a stall child reports on resume, as JSON.
type stallReport struct {
	Gap          time.Duration // how long it was stopped
	PastDeadline time.Duration // how far past its holds' earliest local deadline it resumed
	LoopFirst    bool          // the renewal loop ended a hold before the child asked, or it stopped late: the attempt says nothing
	Lock, Leader signalState   // stallHold: its lock and its leadership
	Held         int           // stallHold: len(Session.Held())
	Token        uint64        // stallCache: the token of the Lock after the resume (0: none)
	LockErr      string        // stallCache: its error
	LockTook     time.Duration // stallCache: how long the Lock took
}

func stateOf(l *Lock) signalState {
	st := signalState{}
	if err := l.Err(); err != nil {
		st.Err = err.Error()
	}
	select {
	case <-l.Done():
		st.Done = true
	default:
	}
	if err := l.Context().Err(); err != nil {
		st.CtxErr = err.Error()
	}
	return st
}

// runStallChild is a stall child: it sets up what its mode says, prints
// "ready <token>" and stops itself (SIGSTOP); once the parent resumes it
// (SIGCONT), it asks baton at once what its mode says, then prints
// "resumed <JSON stallReport>".
//
// What it is told must be what the first caller after a stall is told,
// before the renewal loop (whose timers are overdue then) has looked at
// the deadlines. So it runs with GOMAXPROCS=1 and holds the processor when
// it stops: it signals its own thread with a raw system call, which the
// Go scheduler does not see as one (it would hand the processor over),
// just after it yielded (the scheduler takes the processor from a
// goroutine it saw on the same time slice 10 ms before). So it goes on
// first when resumed. Should the renewal loop still end a hold before the
// child asked, its Observer hears of the loss first and the child says so
// (LoopFirst), and the parent tries again. In mode stallCache the child
// also holds a lock, whose Lost event tells the same.
func runStallChild() int {
	f := strings.Fields(os.Getenv(stallChildEnv))
	if len(f) != 4 {
		fmt.Println("error: want <mode> <addr> <name> <lease>, got", f)
		return 1
	}
	mode, addr, name := f[0], f[1], f[2]
	lease, _ := time.ParseDuration(f[3])
	var asked, loopFirst atomic.Bool
	lost := ObserverFunc(func(_ context.Context, ev Event) {
		if ev.Kind == Lost && !asked.Load() {
			loopFirst.Store(true)
		}
	})
	c, err := New(Options{Redis: rueidis.ClientOption{InitAddress: []string{addr}}, LeaseTTL: lease, CacheIdle: time.Minute, Observer: lost})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	ctx := context.Background()
	var l, leader *Lock
	switch mode {
	case stallHold:
		e, _ := c.Election(name)
		if l, err = c.Lock(ctx, name); err == nil {
			leader, err = e.Campaign(ctx, "child")
		}
		if err == nil {
			l.Context() // made before the stop: what it says after is the question
			leader.Context()
		}
	case stallCache:
		// A lock held, whose deadline comes no later than the cached
		// one's (their renewals go together); then name locked again soon
		// after each Unlock: the third Unlock caches it.
		_, err = c.Lock(ctx, name+"-held")
		for i := 0; i < 3 && err == nil; i++ {
			if l, err = c.Lock(ctx, name); err == nil {
				err = l.Unlock(ctx)
			}
		}
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	deadline := time.Now().Add(lease)
	for _, h := range c.Session().Held() {
		deadline = minTime(deadline, h.Deadline)
	}
	// Made before the stop: what makes a timer may let other goroutines run.
	lctx, cancel := context.WithTimeout(ctx, lease+2*time.Second)
	defer cancel()
	fmt.Println("ready", l.Token())
	runtime.Gosched() // a time slice of its own (see above)
	stopped := time.Now()
	// To this thread: it stops on its way out of the call (to the process,
	// another thread may take the signal while this one runs on).
	syscall.RawSyscall(syscall.SYS_TGKILL, uintptr(os.Getpid()), uintptr(syscall.Gettid()), uintptr(syscall.SIGSTOP))
	resumed := time.Now()
	asked.Store(true)
	var r stallReport
	switch mode {
	case stallHold:
		r.Lock, r.Leader, r.Held = stateOf(l), stateOf(leader), len(c.Session().Held())
	case stallCache:
		l2, err := c.Lock(lctx, name)
		r.LockTook = time.Since(resumed)
		if err != nil {
			r.LockErr = err.Error()
		} else {
			r.Token = l2.Token()
		}
	}
	r.Gap, r.PastDeadline = resumed.Sub(stopped), resumed.Sub(deadline)
	r.LoopFirst = loopFirst.Load() || r.Gap < lease/2
	b, _ := json.Marshal(r)
	fmt.Println("resumed", string(b))
	return 0
}

// stallChild is a running stall child.
type stallChild struct {
	cmd   *exec.Cmd
	out   *bufio.Reader
	token uint64 // the token it printed when ready
}

// startStallChild starts a stall child in mode on srv, killed at
// cleanup, and returns once it is ready.
func startStallChild(t *testing.T, srv *redistest.Server, mode, name string, lease time.Duration) *stallChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stallChildEnv+"="+strings.Join([]string{mode, srv.Addr(), name, lease.String()}, " "), "GOMAXPROCS=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	ch := &stallChild{cmd: cmd, out: bufio.NewReader(stdout)}
	line := ch.line(t, "ready")
	if _, err := fmt.Sscan(line, &ch.token); err != nil {
		t.Fatalf("stall child: ready %q: %v", line, err)
	}
	return ch
}

// line reads the child's next line, which must begin with word, and
// returns the rest; it fails after 10 s.
func (ch *stallChild) line(t *testing.T, word string) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		s, err := ch.out.ReadString('\n')
		if err != nil {
			s = fmt.Sprintf("(%v) %s", err, s)
		}
		got <- s
	}()
	s := waitFor(t, got, 10*time.Second, "the stall child to say "+word)
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), word+" ")
	if !ok {
		t.Fatalf("stall child: %q, want %s", s, word)
	}
	return rest
}

// stopped returns once the child has stopped itself.
func (ch *stallChild) stopped(t *testing.T) {
	t.Helper()
	stat := fmt.Sprintf("/proc/%d/stat", ch.cmd.Process.Pid)
	within(t, 10*time.Second, "the stall child to stop", func() error {
		b, err := os.ReadFile(stat)
		if err != nil {
			return err
		}
		// "<pid> (<comm>) <state> ...": T is stopped.
		if _, after, _ := strings.Cut(string(b), ") "); !strings.HasPrefix(after, "T") {
			return fmt.Errorf("state %.1s", after)
		}
		return nil
	})
}

// resume resumes the child (SIGCONT) and returns its report.
func (ch *stallChild) resume(t *testing.T) stallReport {
	t.Helper()
	if err := ch.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var r stallReport
	if err := json.Unmarshal([]byte(ch.line(t, "resumed")), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// stallAttempts bounds the attempts of a stall test whose renewal loop
// went first (see runStallChild), which happened 3 times in 50.
const stallAttempts = 5

// askedFirst runs attempt, a stall of a new child on a name of its own,
// until the child asked before its renewal loop ended a hold, and
// returns that attempt's report; it fails after stallAttempts attempts.
func askedFirst(t *testing.T, attempt func(name string) stallReport) stallReport {
	t.Helper()
	for i := range stallAttempts {
		r := attempt(uniqueName(t))
		if !r.LoopFirst {
			return r
		}
		t.Logf("attempt %d: the child's renewal loop ran before it asked: again", i+1)
	}
	t.Fatalf("in %d attempts the child's renewal loop ran before it asked", stallAttempts)
	return stallReport{}
}

// TestHoldStoppedPastLeaseIsLostWhenAsked: a process holding a lock and a
// leadership is stopped until both have expired in Redis; resumed, the
// first thing it asks (Err, Done, Context, Session.Held) must say that
// both are lost, although no renewal has run since.
func TestHoldStoppedPastLeaseIsLostWhenAsked(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	observer := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, time.Minute)
	r := askedFirst(t, func(name string) stallReport {
		ch := startStallChild(t, srv, stallHold, name, lease)
		e, _ := observer.Election(name)
		ch.stopped(t)
		within(t, 10*time.Second, "the stopped child's lease to run out in Redis", func() error {
			if lockHeld(t, srv, name) {
				return errors.New("the lock is held")
			}
			if _, err := e.Leader(ctx); !errors.Is(err, ErrNoLeader) {
				return fmt.Errorf("leader: %v", err)
			}
			return nil
		})
		return ch.resume(t)
	})
	t.Logf("resumed after %v, %v past its local deadline: %+v", r.Gap, r.PastDeadline, r)
	if r.PastDeadline <= 0 {
		t.Fatalf("the child resumed %v before its local deadline", -r.PastDeadline)
	}
	for what, st := range map[string]signalState{"lock": r.Lock, "leadership": r.Leader} {
		if !strings.Contains(st.Err, ErrLockLost.Error()) || !st.Done || st.CtxErr == "" {
			t.Errorf("%s, %v past its local deadline: Err %q, Done closed %v, Context().Err %q; want lost, closed, cancelled",
				what, r.PastDeadline, st.Err, st.Done, st.CtxErr)
		}
	}
	if r.Held != 0 {
		t.Errorf("Session.Held lists %d holds %v past their local deadline", r.Held, r.PastDeadline)
	}
}
