package batongocron

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/go-co-op/gocron/v2"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Every scheduler is shut down and every Client closed in its test, so
	// only rueidis's known stragglers may remain.
	goleak.VerifyTestMain(m, redistest.KnownLeaks()...)
}

var nameSeq atomic.Int64

// uniqueName gives each test its own job and election names.
func uniqueName(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), nameSeq.Add(1))
}

// newClient returns a Client on srv, closed at cleanup.
func newClient(t testing.TB, srv *redistest.Server, opt baton.Options) *baton.Client {
	t.Helper()
	opt.Redis = srv.Option()
	c, err := baton.New(opt)
	if err != nil {
		t.Fatalf("baton.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// runs records the runs of one job on several schedulers by tick: tick k
// is the run due at start+k*interval. Each tick is a one-time gocron job
// of the same name (so the same lock and the same Lock and IsLeader calls
// as a recurring job) that knows its k, so that a late run is never taken
// for the next tick. Safe for concurrent use.
type runs struct {
	start    time.Time
	interval time.Duration
	n        int // ticks scheduled

	mu     sync.Mutex
	ticks  map[int][]string // tick -> instances that ran it, in order
	events chan run         // every run, buffered so jobs never block
}

type run struct {
	tick     int
	instance string
}

// newRuns schedules n ticks every interval from 500ms on.
func newRuns(n int, interval time.Duration) *runs {
	return &runs{start: time.Now().Add(500 * time.Millisecond), interval: interval, n: n,
		ticks: map[int][]string{}, events: make(chan run, 10000)}
}

type tickKey struct{}

// tickOf returns the tick of a job's context (gocron passes it to Lock and
// IsLeader).
func tickOf(ctx context.Context) (int, bool) {
	k, ok := ctx.Value(tickKey{}).(int)
	return k, ok
}

// wait returns the next n runs, failing the test if they do not come
// before the last tick is long past.
func (r *runs) wait(t testing.TB, n int) []run {
	t.Helper()
	d := time.Until(r.start.Add(time.Duration(r.n)*r.interval)) + 10*time.Second
	timer := time.NewTimer(d)
	defer timer.Stop()
	var got []run
	for len(got) < n {
		select {
		case ev := <-r.events:
			got = append(got, ev)
		case <-timer.C:
			t.Fatalf("%d runs within %v, want %d: %v", len(got), d, n, r.summary())
		}
	}
	return got
}

// duplicates returns the ticks that ran more than once, with their
// instances.
func (r *runs) duplicates() map[int][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	dup := map[int][]string{}
	for k, who := range r.ticks {
		if len(who) > 1 {
			dup[k] = slices.Clone(who)
		}
	}
	return dup
}

// summary lists every tick and who ran it, for failure messages.
func (r *runs) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := slices.Sorted(maps.Keys(r.ticks))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %d:%v", k, r.ticks[k])
	}
	return b.String()
}

// newScheduler starts a gocron scheduler with opts running r's ticks as
// the job name, each offset later than due (as if its clock were behind),
// and shuts it down at cleanup (if the test did not first).
func newScheduler(t testing.TB, r *runs, instance, name string, offset time.Duration, opts ...gocron.SchedulerOption) gocron.Scheduler {
	t.Helper()
	s, err := gocron.NewScheduler(opts...)
	if err != nil {
		t.Fatalf("gocron.NewScheduler: %v", err)
	}
	t.Cleanup(func() { s.Shutdown() })
	for k := range r.n {
		at := r.start.Add(time.Duration(k)*r.interval + offset)
		_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartDateTime(at)),
			gocron.NewTask(func() {
				r.mu.Lock()
				r.ticks[k] = append(r.ticks[k], instance)
				r.mu.Unlock()
				r.events <- run{k, instance}
			}),
			gocron.WithName(name),
			gocron.WithContext(context.WithValue(context.Background(), tickKey{}, k)))
		if err != nil {
			t.Fatalf("NewJob: %v", err)
		}
	}
	s.Start()
	return s
}
