package baton

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// campaigner campaigns in an election of its client from a goroutine.
type campaigner struct {
	c *Client
	e *Election
	q <-chan string // the client's onQueue channel, set once
}

func newCampaigner(t *testing.T, c *Client, name string) *campaigner {
	t.Helper()
	e, err := c.Election(name)
	if err != nil {
		t.Fatal(err)
	}
	return &campaigner{c: c, e: e, q: onQueue(c)}
}

// queued starts Campaign(ctx, value) in a goroutine and returns once it
// waits in the Redis queue. The channel gets the leadership (nil after an
// error, which fails the test).
func (p *campaigner) queued(t *testing.T, ctx context.Context, value string) <-chan *Lock {
	t.Helper()
	got := make(chan *Lock, 1)
	go func() {
		l, err := p.e.Campaign(ctx, value)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, p.q, 5*time.Second, value+" to queue")
	return got
}

func (p *campaigner) lead(t *testing.T, ctx context.Context, value string) *Lock {
	t.Helper()
	l, err := p.e.Campaign(ctx, value)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// wantLeader fails unless e's leader is value with l's token.
func wantLeader(t *testing.T, ctx context.Context, e *Election, value string, l *Lock) {
	t.Helper()
	got, err := e.Leader(ctx)
	if err != nil || got != (Leader{Value: value, Token: l.Token()}) {
		t.Fatalf("Leader: %+v, %v; want %q with token %d", got, err, value, l.Token())
	}
}

func wantNoLeader(t *testing.T, ctx context.Context, e *Election, when string) {
	t.Helper()
	if got, err := e.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader %s: %+v, %v; want ErrNoLeader", when, got, err)
	}
}

// next returns the next value observed, failing after 5 s.
func next(t *testing.T, obs <-chan Leader, what string) Leader {
	t.Helper()
	select {
	case v, ok := <-obs:
		if !ok {
			t.Fatalf("Observe's channel closed waiting for %s", what)
		}
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// wantClosed fails unless obs is closed within 5 s, with no value before.
func wantClosed(t *testing.T, obs <-chan Leader, what string) {
	t.Helper()
	select {
	case v, ok := <-obs:
		if ok {
			t.Fatalf("observed %+v, want the channel closed at %s", v, what)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Observe's channel still open after %s", what)
	}
}

func wantNext(t *testing.T, obs <-chan Leader, value string, l *Lock) {
	t.Helper()
	want := Leader{}
	if l != nil {
		want = Leader{Value: value, Token: l.Token()}
	}
	if got := next(t, obs, "leader "+value); got != want {
		t.Fatalf("observed %+v, want %+v", got, want)
	}
}

// TestElectionCampaign: Campaign blocks while another leads and returns
// at once (a grant) after the leader resigns; Leader reports value and
// token, and ErrNoLeader on a fresh name and after the last resignation.
func TestElectionCampaign(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newClient(t, srv, Options{}), newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	pa, pb := newCampaigner(t, a, name), newCampaigner(t, b, name)
	wantNoLeader(t, ctx, pa.e, "of a fresh name")

	la := pa.lead(t, ctx, "a:1")
	if la.Name() != name {
		t.Fatalf("leadership Name %q, want %q", la.Name(), name)
	}
	wantLeader(t, ctx, pb.e, "a:1", la)
	got := pb.queued(t, ctx, "b with spaces: 2")
	select {
	case <-got:
		t.Fatal("Campaign returned while another led")
	default:
	}
	resigned := time.Now()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb := waitFor(t, got, 5*time.Second, "b to lead")
	took := time.Since(resigned)
	t.Logf("b leads %v after a resigned (lease %v)", took, DefaultLeaseTTL)
	if lb == nil {
		t.FailNow()
	}
	if took > DefaultLeaseTTL/10 {
		t.Fatalf("b led %v after a resigned: not a grant", took)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token %d after %d", lb.Token(), la.Token())
	}
	wantLeader(t, ctx, pa.e, "b with spaces: 2", lb)
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wantNoLeader(t, ctx, pa.e, "after the last resignation")
	k := newElectKeys(DefaultKeyPrefix, name)
	if fields, _ := srv.Do(t, "HKEYS", k.Lock).AsStrSlice(); len(fields) != 2 {
		t.Fatalf("hash fields after the last resignation: %v, want #f and #l", fields)
	}
}

// TestElectionObserveTurns: an observer sees the current leader first,
// then every change in order while clients A, B, C take turns (A, B, C,
// nobody, A); a second observer of the same client (sharing its
// subscription) sees the same.
func TestElectionObserveTurns(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	var ps []*campaigner
	for range 3 {
		ps = append(ps, newCampaigner(t, newClient(t, srv, Options{}), name))
	}
	o := newClient(t, srv, Options{})
	oe, _ := o.Election(name)
	obs1, obs2 := oe.Observe(ctx), oe.Observe(ctx)
	both := func(value string, l *Lock) {
		t.Helper()
		wantNext(t, obs1, value, l)
		wantNext(t, obs2, value, l)
	}
	both("nobody", nil)
	la := ps[0].lead(t, ctx, "A")
	both("A", la)
	gb := ps[1].queued(t, ctx, "B")
	gc := ps[2].queued(t, ctx, "C")
	la.Unlock(ctx)
	lb := waitFor(t, gb, 5*time.Second, "B to lead")
	both("B", lb)
	lb.Unlock(ctx)
	lc := waitFor(t, gc, 5*time.Second, "C to lead")
	both("C", lc)
	lc.Unlock(ctx)
	both("nobody", nil)
	la2 := ps[0].lead(t, ctx, "A")
	both("A", la2)
	la2.Unlock(ctx)
	both("nobody", nil)
}

// TestElectionObserveSlowReader: a reader that does not keep up gets the
// latest leader, not a backlog.
func TestElectionObserveSlowReader(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	p := newCampaigner(t, newClient(t, srv, Options{}), name)
	obs, fast := p.e.Observe(ctx), p.e.Observe(ctx)
	wantNext(t, obs, "nobody", nil)
	wantNext(t, fast, "nobody", nil)
	var l *Lock
	for i := range 6 {
		if l != nil {
			l.Unlock(ctx)
		}
		l = p.lead(t, ctx, "v"+string(rune('0'+i)))
	}
	// Six leaders and five gaps came. Once the other observer (on the
	// same subscription) has seen the last, so has this one's goroutine:
	// the reader gets at most one value it could not be spared (taken
	// from the channel while the goroutine caught up), then the latest.
	want := Leader{Value: "v5", Token: l.Token()}
	for next(t, fast, "the latest leader") != want {
	}
	for reads := 1; ; reads++ {
		got := next(t, obs, "the latest leader")
		if got == want {
			t.Logf("latest leader after %d reads", reads)
			break
		}
		if reads == 2 {
			t.Fatalf("read %+v after %+v: a backlog", got, want)
		}
	}
	l.Unlock(ctx)
}

// TestElectionObserveEnds: Observe's channel is closed when its ctx ends
// and when the client closes.
func TestElectionObserveEnds(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	e, _ := c.Election(uniqueName(t))
	octx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := e.Observe(octx)
	wantNext(t, obs, "nobody", nil)
	cancel()
	wantClosed(t, obs, "ctx end")
	obs2 := e.Observe(context.Background())
	wantNext(t, obs2, "nobody", nil)
	c.Close()
	wantClosed(t, obs2, "Client.Close")
	wantClosed(t, e.Observe(context.Background()), "Observe of a closed client")
}

// TestElectionObserveReconnect: changes announced while the observer's
// connection is partitioned are lost with it; after the reconnection the
// observer reports the leader it finds, well before any lease runs out.
func TestElectionObserveReconnect(t *testing.T) {
	srv := redistest.Start(t)
	px := faultproxy.Start(t, srv.Addr())
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	pa := newCampaigner(t, newClient(t, srv, Options{}), name)
	pb := newCampaigner(t, newClient(t, srv, Options{}), name)
	o := newClient(t, srv, Options{Redis: redisOpt(func(o *rueidisOption) { o.InitAddress = []string{px.Addr()} })})
	oe, _ := o.Election(name)
	obs := oe.Observe(ctx)
	wantNext(t, obs, "nobody", nil)
	la := pa.lead(t, ctx, "A")
	wantNext(t, obs, "A", la)
	gb := pb.queued(t, ctx, "B")

	px.Blackhole(true)
	la.Unlock(ctx)
	lb := waitFor(t, gb, 5*time.Second, "B to lead")
	px.Cut() // drops what the partition held: B's announcement
	cut := time.Now()
	px.Blackhole(false)
	// B renews and leads on; only a read after the reconnection can
	// tell the observer (A's lease end is 10 s away).
	for {
		got := next(t, obs, "B after the reconnection")
		if got == (Leader{Value: "B", Token: lb.Token()}) {
			break
		}
		if got != (Leader{}) {
			t.Fatalf("observed %+v", got)
		}
	}
	t.Logf("B observed %v after the cut", time.Since(cut))
	if time.Since(cut) > DefaultLeaseTTL/2 {
		t.Fatal("observed only after a lease: no read on reconnection")
	}
	lb.Unlock(ctx)
	wantNext(t, obs, "nobody", nil)
}

// TestElectionSameSession: two goroutines of one session campaign with
// different values; each value is reported while its campaign leads.
func TestElectionSameSession(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	p := newCampaigner(t, c, name)
	obs := p.e.Observe(ctx)
	wantNext(t, obs, "nobody", nil)
	lx := p.lead(t, ctx, "x")
	wantNext(t, obs, "x", lx)
	gy := p.queued(t, ctx, "y")
	wantLeader(t, ctx, p.e, "x", lx)
	if w := c.Session().Waiting()[name]; w != 1 {
		t.Fatalf("Waiting()[%q] = %d, want 1", name, w)
	}
	if h := c.Session().Held(); len(h) != 1 || h[0].Name != name || h[0].Token != lx.Token() {
		t.Fatalf("Held: %+v", h)
	}
	lx.Unlock(ctx)
	ly := waitFor(t, gy, 5*time.Second, "y to lead")
	if ly == nil {
		t.FailNow()
	}
	wantNext(t, obs, "y", ly)
	wantLeader(t, ctx, p.e, "y", ly)
	ly.Unlock(ctx)
	wantNext(t, obs, "nobody", nil)
}

// TestElectionLoss: the election hash deleted from outside ends the
// leadership (Done, ErrLockLost) at the next renewal, and observers see
// the queued campaigner lead next.
func TestElectionLoss(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 300 * time.Millisecond
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	pa := newCampaigner(t, newClient(t, srv, Options{LeaseTTL: lease}), name)
	pb := newCampaigner(t, newClient(t, srv, Options{LeaseTTL: lease}), name)
	obs := pb.e.Observe(ctx)
	wantNext(t, obs, "nobody", nil)
	la := pa.lead(t, ctx, "A")
	wantNext(t, obs, "A", la)
	gb := pb.queued(t, ctx, "B")
	srv.Do(t, "DEL", newElectKeys(DefaultKeyPrefix, name).Lock)
	waitFor(t, la.Done(), 3*time.Second, "the leadership's loss")
	if !errors.Is(la.Err(), ErrLockLost) {
		t.Fatalf("Err %v, want ErrLockLost", la.Err())
	}
	lb := waitFor(t, gb, 5*time.Second, "B to lead")
	if lb == nil {
		t.FailNow()
	}
	for {
		got := next(t, obs, "B")
		if got == (Leader{Value: "B", Token: lb.Token()}) {
			break
		}
		if got != (Leader{}) {
			t.Fatalf("observed %+v", got)
		}
	}
	lb.Unlock(ctx)
	wantNext(t, obs, "nobody", nil)
}

// TestElectionLeaderCrash: a leader process is SIGKILLed; Leader reports
// ErrNoLeader, and observers the end of its term, within its lease plus
// a margin.
func TestElectionLeaderCrash(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	name := uniqueName(t)
	cmd := startHolder(t, srv, name, lease, "elect")
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	e, _ := c.Election(name)
	obs := e.Observe(ctx)
	if got := next(t, obs, "the child"); got.Value != "child" {
		t.Fatalf("observed %+v, want the child", got)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	cmd.Wait()
	if got := next(t, obs, "nobody"); got != (Leader{}) {
		t.Fatalf("observed %+v after the crash, want nobody", got)
	}
	took := time.Since(killed)
	t.Logf("observed the end of the term %v after the kill (lease %v)", took, lease)
	if took > lease+time.Second {
		t.Fatalf("observed after %v, more than lease %v + 1s", took, lease)
	}
	wantNoLeader(t, ctx, e, "after the leader crashed")
}

// TestElectionGiveUp: a campaign whose ctx ends leaves no queue entry and
// no value.
func TestElectionGiveUp(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	pa := newCampaigner(t, newClient(t, srv, Options{}), name)
	pb := newCampaigner(t, newClient(t, srv, Options{}), name)
	la := pa.lead(t, ctx, "A")
	wctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := pb.e.Campaign(wctx, "B")
		got <- err
	}()
	waitFor(t, pb.q, 5*time.Second, "B to queue")
	cancel()
	if err := waitFor(t, got, 5*time.Second, "B to give up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign: %v, want context.Canceled", err)
	}
	k := newElectKeys(DefaultKeyPrefix, name)
	// The entry leaves before Campaign returns, unless B's last attempt
	// was still unanswered: then in the background, within a lease.
	for end := time.Now().Add(5 * time.Second); ; {
		n, _ := srv.Do(t, "EXISTS", k.Queue()).AsInt64()
		if n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("queue keys left 5s after B gave up")
		}
	}
	fields, _ := srv.Do(t, "HKEYS", k.Lock).AsStrSlice()
	values := slices.DeleteFunc(slices.Clone(fields), func(f string) bool { return !strings.HasPrefix(f, "#v:") })
	if len(values) != 1 {
		t.Fatalf("hash fields %v after B gave up: want A's value alone", fields)
	}
	la.Unlock(ctx)
}

// TestElectionCluster: campaign, resign and observe on a 3-primary
// cluster, where grants and announcements go by SPUBLISH.
func TestElectionCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	pa := newCampaigner(t, newClientOn(t, Options{Redis: cl.Option()}), name)
	pb := newCampaigner(t, newClientOn(t, Options{Redis: cl.Option()}), name)
	obs := pb.e.Observe(ctx)
	wantNext(t, obs, "nobody", nil)
	la := pa.lead(t, ctx, "A")
	wantNext(t, obs, "A", la)
	wantLeader(t, ctx, pb.e, "A", la)
	gb := pb.queued(t, ctx, "B")
	resigned := time.Now()
	la.Unlock(ctx)
	lb := waitFor(t, gb, 5*time.Second, "B to lead")
	if lb == nil {
		t.FailNow()
	}
	if took := time.Since(resigned); took > DefaultLeaseTTL/10 {
		t.Fatalf("B led %v after A resigned: not a grant", took)
	}
	wantNext(t, obs, "B", lb)
	lb.Unlock(ctx)
	wantNext(t, obs, "nobody", nil)
	wantNoLeader(t, ctx, pa.e, "after the last resignation")
}

// TestObservePendingLeader: while a new leadership is granted but not yet
// taken (its campaigner is 700 ms away), a reader that reads Redis sees
// nobody, and must still report the new leader once it takes it. (The
// script-level cause, a read that reported the pending grant's fence, is
// pinned by TestElectReadPendingFence.)
func TestObservePendingLeader(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const lease = time.Second
	p := faultproxy.Start(t, srv.Addr())
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	a := newCampaigner(t, newClient(t, srv, Options{LeaseTTL: lease}), name)
	b := newCampaigner(t, newClientThrough(t, srv, p, lease), name)
	o := newCampaigner(t, newClient(t, srv, Options{LeaseTTL: lease}), name)
	la := a.lead(t, ctx, "a")
	obs := o.e.Observe(ctx)
	wantNext(t, obs, "a", la)
	got := b.queued(t, ctx, "b")
	// The grant message to b and b's taking of it each take 1.4 s: the
	// reader reads Redis at a's lease end meanwhile.
	p.SetLatency(700*time.Millisecond, 0)
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var lb *Lock
	for deadline := time.After(8 * time.Second); ; {
		select {
		case v := <-obs:
			if v.Value == "b" {
				p.SetLatency(0, 0)
				lb = waitFor(t, got, 5*time.Second, "b's Campaign")
				if lb == nil || v.Token != lb.Token() {
					t.Fatalf("observed %+v, b's leadership %v", v, lb)
				}
				lb.Unlock(ctx)
				return
			}
		case <-deadline:
			t.Fatal("the reader never reported b, who took the leadership")
		}
	}
}

// TestElectReadPendingFence: a pending grant leads nobody, and the read
// reports the fence before it, so that the grantee's announcement, under
// the pending fence, is a later state for a reader. Were the read to
// report the pending fence, Observe would drop the announcement and never
// report that leader (make bench-failover's readers, after a SIGKILL of
// the leader, show the same).
func TestElectReadPendingFence(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 5*time.Second)
	name := uniqueName(t)
	k := newElectKeys(DefaultKeyPrefix, name).Lock
	dl := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	srv.Do(t, "HSET", k, "#f", "100", "#l", "1", "x-1.e0", "100:"+dl, "#p:x-1.e0", "1", "#v:x-1.e0", "v")
	r, err := c.readLeader(ctx, name)
	if err != nil || r.held || r.fence != 99 {
		t.Fatalf("read with a pending grant of fence 100: %+v, %v; want nobody, fence 99", r, err)
	}
	ev, ok := parseElectEvent("100 1000 x-1.e0 v")
	if !ok || !ev.after(r) {
		t.Fatalf("the grantee's announcement %+v is not after the read %+v", ev, r)
	}
	srv.Do(t, "HDEL", k, "#p:x-1.e0")
	if r, err := c.readLeader(ctx, name); err != nil || !r.held || r.leader.Value != "v" {
		t.Fatalf("read once taken: %+v, %v; want v leading", r, err)
	}
}

// TestObserveReportsNoPhantomLeaders: Observe reports only leaders whose
// Campaign returned the leadership. The scripts announce a grant when they
// make it; a grant to a campaign that gave up meanwhile is passed on by
// its client, and observers must not report it as a leader.
//
// Three clients, four goroutines each, campaign for 3 s with short ctx
// deadlines (1-21 ms) and unique values, holding 0-3 ms; a fourth client
// observes and records every leader reported. Every leader it reports
// must be one that a Campaign call returned (value and token).
func TestObserveReportsNoPhantomLeaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	name := uniqueName(t)
	ctx := ctxTimeout(t, 30*time.Second)
	o := newClient(t, srv, Options{})
	eo, _ := o.Election(name)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs := eo.Observe(octx)
	var observed []Leader // written by the reader until readerDone
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for v := range obs {
			if v != (Leader{}) {
				observed = append(observed, v)
			}
		}
	}()
	var (
		mu       sync.Mutex // protects returned
		returned = make(map[Leader]bool)
		gaveUp   atomic.Int64
		wg       sync.WaitGroup
	)
	stop := time.Now().Add(3 * time.Second)
	for ci := range 3 {
		c := newClient(t, srv, Options{LeaseTTL: time.Second})
		e, _ := c.Election(name)
		for g := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(g)))
				for seq := 0; time.Now().Before(stop); seq++ {
					value := fmt.Sprintf("c%d.%d-%d", ci, g, seq)
					cctx, ccancel := context.WithTimeout(ctx, time.Millisecond+time.Duration(rng.IntN(20000))*time.Microsecond)
					l, err := e.Campaign(cctx, value)
					ccancel()
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("Campaign: %v", err)
							return
						}
						gaveUp.Add(1)
						continue
					}
					mu.Lock()
					returned[Leader{Value: value, Token: l.Token()}] = true
					mu.Unlock()
					time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond) // the term
					if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrLockLost) {
						t.Errorf("Unlock: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("campaigns done after %v", time.Since(stop.Add(-3*time.Second)).Round(time.Millisecond))
	cancel()
	<-readerDone
	var phantoms []Leader
	for _, v := range observed {
		if !returned[v] {
			phantoms = append(phantoms, v)
		}
	}
	t.Logf("%d leaderships returned, %d campaigns gave up, %d leaders observed, %d phantoms", len(returned), gaveUp.Load(), len(observed), len(phantoms))
	if len(phantoms) > 0 {
		t.Fatalf("the observer reported %d leaders that no Campaign returned, e.g. %+v", len(phantoms), phantoms[:min(3, len(phantoms))])
	}
}

// TestDeadCampaignerSkipped: a dead queued campaigner is skipped: the
// leadership goes to the next live campaigner, and observers never report
// the dead one as leader. A grant to the dead member would keep the
// leadership taken for its whole lease.
//
// Lease 1 s: a leads; a child process campaigns ("child") and queues; b
// (alive) queues behind it; an observer watches. The child is SIGKILLed;
// 600 ms later (its queue entry has missed a refresh) a resigns. b must
// lead within 400 ms of the resignation, and the observer must never
// report "child".
func TestDeadCampaignerSkipped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const lease = time.Second
	name := uniqueName(t)
	ctx := ctxTimeout(t, 15*time.Second)
	a := newClient(t, srv, Options{LeaseTTL: lease})
	ea, _ := a.Election(name)
	la, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	o := newClient(t, srv, Options{})
	eo, _ := o.Election(name)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs := eo.Observe(octx)
	var seen []Leader // written by the reader until obsDone
	bObserved := make(chan struct{}, 1)
	obsDone := make(chan struct{})
	go func() {
		defer close(obsDone)
		for v := range obs {
			seen = append(seen, v)
			if v.Value == "b" {
				select {
				case bObserved <- struct{}{}:
				default:
				}
			}
		}
	}()
	child := startQueuedChild(t, srv, name, lease, "elect")
	waitListLen(t, srv, newElectKeys(DefaultKeyPrefix, name).Queue(), 1)
	b := newClient(t, srv, Options{LeaseTTL: lease})
	eb, _ := b.Election(name)
	qb := onQueue(b)
	bGot := make(chan lockResult, 1)
	go func() {
		l, err := eb.Campaign(ctx, "b")
		bGot <- lockResult{l, err}
	}()
	waitFor(t, qb, 5*time.Second, "b to queue")
	killChildren(t, child)
	time.Sleep(600 * time.Millisecond) // the child has been dead for 600 ms: the fault's duration
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	resigned := time.Now()
	var lb *Lock
	select {
	case r := <-bGot:
		if r.err != nil {
			t.Fatalf("b: %v", r.err)
		}
		lb = r.l
		t.Logf("b leads %v after a resigned", time.Since(resigned).Round(time.Millisecond))
	case <-time.After(400 * time.Millisecond):
		r := waitFor(t, bGot, 5*time.Second, "b to lead")
		lb = r.l
		t.Errorf("b leads only %v after a resigned, want within 400 ms (lease %v)", time.Since(resigned).Round(time.Millisecond), lease)
	}
	if lb != nil {
		select { // let the reader see b's leadership before it stops
		case <-bObserved:
		case <-time.After(2 * time.Second):
		}
	}
	cancel()
	<-obsDone
	for _, v := range seen {
		if v.Value == "child" {
			t.Errorf("the observer reported the dead child as leader: %+v (all: %+v)", v, seen)
			break
		}
	}
	if lb != nil {
		lb.Unlock(ctx)
	}
}
