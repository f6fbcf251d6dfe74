package baton

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/batonlock/baton/internal/wire"
	"github.com/redis/rueidis"
)

// Baton run as a Redis ACL user: helpers, and the README's least-privilege
// user (whose line acl_test.go reads and derives) running every primitive.

// aclUser creates user name with rules on srv and returns client options
// that log in as it.
func aclUser(t *testing.T, srv *redistest.Server, name string, rules ...string) rueidisOption {
	t.Helper()
	args := append([]string{"ACL", "SETUSER", name, "reset", "on", ">pw"}, rules...)
	if err := srv.Do(t, args...).Error(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return redisOpt(func(o *rueidisOption) { o.Username, o.Password = name, "pw" })
}

// newUserClient is newClient logging in with ro's credentials (newClient
// copies only some fields of Options.Redis).
func newUserClient(t *testing.T, srv *redistest.Server, ro rueidisOption, opt Options) *Client {
	t.Helper()
	c, err := newUserClientErr(srv, ro, opt)
	if err != nil {
		t.Fatalf("New as %s: %v", ro.Username, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newUserClientErr(srv *redistest.Server, ro rueidisOption, opt Options) (*Client, error) {
	o := srv.Option()
	o.Username, o.Password = ro.Username, ro.Password
	opt.Redis = o
	return New(opt)
}

// aclDenials returns ACL LOG entries as "reason object (context, user)".
func aclDenials(t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	entries, err := srv.Do(t, "ACL", "LOG").ToArray()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		m, err := e.AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m["reason"]+" "+m["object"]+" ("+m["context"]+", user "+m["username"]+")")
	}
	return out
}

// aclLease is the lease of the ACL tests' clients: short, so that a hold
// outlives it (renewals) within the test.
const aclLease = 500 * time.Millisecond

// aclPeer is a Client logged in as the README's user, with the channel its
// waiters report queueing on.
type aclPeer struct {
	*Client
	queued <-chan string // onQueue's, set once before first use
}

// aclSetup creates the README's user on every node with exactly its ACL
// line and returns the line and two clients logged in as that user.
func aclSetup(t *testing.T, nodes []*redistest.Server, ro rueidis.ClientOption, opt Options) (line aclRules, a, b aclPeer) {
	t.Helper()
	line = parseACL(t, readmeBlock(t, aclMarker))
	aclApply(t, nodes, line)
	ro.Username, ro.Password = line.user, line.password
	opt.Redis = ro
	peer := func() aclPeer {
		c := newClientOn(t, opt)
		return aclPeer{c, onQueue(c)}
	}
	return line, peer(), peer()
}

// aclApply sends r's line, as it is, to every node.
func aclApply(t *testing.T, nodes []*redistest.Server, r aclRules) {
	t.Helper()
	for _, n := range nodes {
		if err := n.Do(t, r.argv...).Error(); err != nil {
			t.Fatalf("%s on %s: %v", strings.Join(r.argv, " "), n.Addr(), err)
		}
	}
}

// wantNoDenials fails if any node's ACL LOG has an entry.
func wantNoDenials(t *testing.T, nodes []*redistest.Server) {
	t.Helper()
	for _, n := range nodes {
		if d := aclDenials(t, n); len(d) > 0 {
			t.Errorf("%s denied the README's user:\n%s", n.Addr(), strings.Join(d, "\n"))
		}
	}
}

// aclGot is the outcome of an acquisition run in a goroutine.
type aclGot struct {
	l   *Lock
	err error
}

// queue runs acquire in a goroutine and returns once it waits in Redis's
// queue of name; the channel gets its outcome.
func (p aclPeer) queue(t *testing.T, name string, acquire func() (*Lock, error)) <-chan aclGot {
	t.Helper()
	for len(p.queued) > 0 {
		<-p.queued
	}
	got := make(chan aclGot, 1)
	go func() {
		l, err := acquire()
		got <- aclGot{l, err}
	}()
	for waitFor(t, p.queued, 5*time.Second, name+" to queue") != name {
	}
	return got
}

// aclTake returns what a queued acquisition got, failing on its error,
// and unless it got it within half a lease of freed: woken by its grant
// (or an invalidation), not by a timer.
func aclTake(t *testing.T, got <-chan aclGot, freed time.Time, what string) *Lock {
	t.Helper()
	r := waitFor(t, got, 5*time.Second, what)
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	if took := time.Since(freed); took > aclLease/2 {
		t.Fatalf("%s got it %v after it was freed: not woken by its grant", what, took)
	}
	return r.l
}

// aclWaitRenewed returns once s has held name (a p) for longer than the lease
// it was acquired with, and still holds it: only renewals keep it so long.
func aclWaitRenewed(t *testing.T, s *Session, p Primitive, name string) {
	t.Helper()
	held := func() (HeldLock, bool) {
		for _, h := range s.Held() {
			if h.Kind == p && h.Name == name {
				return h, true
			}
		}
		return HeldLock{}, false
	}
	h, ok := held()
	if !ok {
		t.Fatalf("%s %s is not held", p, name)
	}
	timer := time.NewTimer(time.Until(h.AcquiredAt.Add(s.LeaseTTL() + s.LeaseTTL()/10)))
	defer timer.Stop()
	<-timer.C
	if h2, ok := held(); !ok || h2.Token != h.Token || !h2.Deadline.After(time.Now()) {
		t.Fatalf("%s %s held as %+v, a lease later as %+v (%v): not renewed", p, name, h, h2, ok)
	}
}

// aclLocks: Lock, TryLock of a held name, a Lock woken by a grant while
// the holder renews past its lease, a Lock that gives up (leaving the
// queue), Do, and a session's Close.
func aclLocks(t *testing.T, a, b aclPeer) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if _, err := b.TryLock(ctx, name); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	got := b.queue(t, name, func() (*Lock, error) { return b.Lock(ctx, name) })
	aclWaitRenewed(t, a.Session(), PrimitiveLock, name)
	if err := la.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	lb := aclTake(t, got, time.Now(), "the queued Lock")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := a.Lock(short, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: %v", err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := a.Do(ctx, name, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do: %v", err)
	}
	s, err := b.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock(ctx, name); err != nil {
		t.Fatalf("Session.Lock: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Session.Close: %v", err)
	}
	l, err := a.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock after Session.Close: %v", err)
	}
	l.Unlock(ctx)
}

// aclSemaphore: Acquire, TryAcquire of a full semaphore, a queued Acquire
// granted a freed permit while its holder renews past its lease, and an
// Acquire that gives up.
func aclSemaphore(t *testing.T, a, b aclPeer) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	ma, err := a.Semaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := b.Semaphore(name, 2)
	pa, err := ma.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	pb, err := mb.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if _, err := mb.TryAcquire(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryAcquire of a full semaphore: %v", err)
	}
	got := b.queue(t, name, func() (*Lock, error) { return mb.Acquire(ctx) })
	aclWaitRenewed(t, a.Session(), PrimitiveSemaphore, name)
	if err := pa.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	pb2 := aclTake(t, got, time.Now(), "the queued Acquire")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := ma.Acquire(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its deadline: %v", err)
	}
	for _, p := range []*Lock{pb, pb2} {
		if err := p.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
}

// aclElection: Observe, Campaign, Leader, and a queued Campaign that takes
// over when the leader, renewed past its lease, resigns.
func aclElection(t *testing.T, a, b aclPeer) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	ea, err := a.Election(name)
	if err != nil {
		t.Fatal(err)
	}
	eb, _ := b.Election(name)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := eb.Observe(octx)
	wantNext(t, obs, "nobody", nil)
	la, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	wantNext(t, obs, "a", la)
	wantLeader(t, ctx, eb, "a", la)
	got := b.queue(t, name, func() (*Lock, error) { return eb.Campaign(ctx, "b") })
	aclWaitRenewed(t, a.Session(), PrimitiveElection, name)
	if err := la.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	lb := aclTake(t, got, time.Now(), "the queued Campaign")
	wantNext(t, obs, "b", lb)
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	wantNext(t, obs, "nobody", nil)
	wantNoLeader(t, ctx, ea, "after the last resignation")
	stop()
	wantClosed(t, obs, "the end of Observe's ctx")
}

// aclAdmin: Client.Admin's Inspect of a held name with a queued session,
// and its ForceRelease, which grants the name to that session; the evicted
// holder hears of it.
func aclAdmin(t *testing.T, a, b aclPeer) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	got := b.queue(t, name, func() (*Lock, error) { return b.Lock(ctx, name) })
	n, err := a.Admin().Inspect(ctx, name)
	if err != nil || !n.Held || n.Token != la.Token() || n.QueueLen != 1 {
		t.Fatalf("Inspect = %+v, %v; want held with token %d and one queued", n, err, la.Token())
	}
	r, err := b.Admin().ForceRelease(ctx, name)
	if err != nil || r.Action != admin.ActionGranted {
		t.Fatalf("ForceRelease = %+v, %v; want %s", r, err, admin.ActionGranted)
	}
	lb := aclTake(t, got, time.Now(), "the queued Lock after ForceRelease")
	waitFor(t, la.Done(), 5*time.Second, "the evicted holder to hear of it")
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// aclConfined: ACL DRYRUN allows the user every key and channel baton uses
// for a name and for c, and what rueidis sends of itself; each key and
// channel pattern of the line is needed by one of them, and a key or
// channel outside the prefix is refused.
func aclConfined(t *testing.T, srv *redistest.Server, line aclRules, c *Client) {
	name := uniqueName(t)
	p := c.prefix
	var ks []string
	for _, k := range []wire.Keys{newKeys(p, name), newSemKeys(p, name), newElectKeys(p, name)} {
		ks = append(ks, k.List()...)
	}
	chans := []string{c.channel, grantChannel(p, name), semGrantChannel(p, name), electChannel(p, name)}
	allowed := func(args ...string) bool {
		s, err := srv.Do(t, append([]string{"ACL", "DRYRUN", line.user}, args...)...).ToString()
		return err == nil && s == "OK"
	}
	for _, k := range ks {
		if !allowed("GET", k) {
			t.Errorf("the ACL line refuses key %q", k)
		}
	}
	for _, ch := range chans {
		if !allowed("PUBLISH", ch, "x") {
			t.Errorf("the ACL line refuses channel %q", ch)
		}
	}
	for _, s := range rueidisSent {
		if !allowed(s.argv...) {
			t.Errorf("the ACL line refuses %q, which rueidis sends %s", s.argv, s.why)
		}
	}
	needed := func(what string, patterns, used []string) {
		for _, pat := range patterns {
			if !slices.ContainsFunc(used, func(u string) bool { return strings.HasPrefix(u, strings.TrimSuffix(pat, "*")) }) {
				t.Errorf("the ACL line allows %s %q, which baton does not use", what, pat)
			}
		}
	}
	needed("keys", line.keys, ks)
	needed("channels", line.channels, chans)
	if allowed("GET", "other:{x}") || allowed("PUBLISH", "other", "x") {
		t.Error("the ACL line allows a key or a channel outside the prefix")
	}
}

// aclList: Admin.List is refused (NOPERM) to the library's user, and lists
// a held name once the README's listing line has been sent too.
func aclList(t *testing.T, nodes []*redistest.Server, a aclPeer) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	l, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	_, _, err = a.Admin().List(ctx, name, "")
	wantRedisErr(t, "List as the library's user", err, "NOPERM")
	for _, n := range nodes {
		n.Do(t, "ACL", "LOG", "RESET")
	}
	aclApply(t, nodes, parseACL(t, readmeBlock(t, aclListMarker)))
	found := false
	for cursor := ""; ; {
		names, next, err := a.Admin().List(ctx, name, cursor)
		if err != nil {
			t.Fatalf("List as a user given the listing line: %v", err)
		}
		for _, n := range names {
			found = found || (n.Name == name && n.Held)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if !found {
		t.Fatalf("List did not find the held name %q", name)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// aclFinish fails on any denial so far, checks listing (aclList), closes
// both clients (a while holding a lock, which Close releases) and fails on
// any denial.
func aclFinish(t *testing.T, nodes []*redistest.Server, a, b aclPeer) {
	t.Helper()
	wantNoDenials(t, nodes)
	t.Run("list", func(t *testing.T) { aclList(t, nodes, a) })
	name := uniqueName(t)
	if _, err := a.Lock(ctxTimeout(t, 10*time.Second), name); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	for _, c := range []*Client{a.Client, b.Client} {
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	for _, n := range nodes {
		if v, err := n.Do(t, "GET", newKeys(DefaultKeyPrefix, name).Lock).ToString(); err == nil && !strings.HasPrefix(v, "~") {
			t.Errorf("Close left %s held by %q", name, v)
		}
	}
	wantNoDenials(t, nodes)
}

// TestACLStandalone: as a user created with exactly the README's ACL line,
// Client.Check finds nothing missing, every primitive and Client.Admin's Inspect and ForceRelease work, Redis
// denies nothing, the user is confined to baton's keys and channels, and
// listing names needs the README's listing line.
func TestACLStandalone(t *testing.T) {
	srv := redistest.Start(t)
	nodes := []*redistest.Server{srv}
	line, a, b := aclSetup(t, nodes, srv.Option(), Options{LeaseTTL: aclLease})
	if !a.Tracking() {
		t.Fatal("Redis refused the user client-side caching")
	}
	if err := a.Check(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Errorf("Check as the README's user: %v", err)
	}
	t.Run("lock", func(t *testing.T) { aclLocks(t, a, b) })
	t.Run("semaphore", func(t *testing.T) { aclSemaphore(t, a, b) })
	t.Run("election", func(t *testing.T) { aclElection(t, a, b) })
	t.Run("admin", func(t *testing.T) { aclAdmin(t, a, b) })
	t.Run("confined", func(t *testing.T) { aclConfined(t, srv, line, a.Client) })
	aclFinish(t, nodes, a, b)
}

// TestACLCluster: TestACLStandalone on a 3-primary Cluster, where grants
// and announcements go by SSUBSCRIBE and SPUBLISH.
func TestACLCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	_, a, b := aclSetup(t, cl.Nodes, cl.Option(), Options{LeaseTTL: aclLease})
	if !a.sharded {
		t.Fatal("not a Cluster client: was CLUSTER SLOTS refused?")
	}
	if err := a.Check(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Errorf("Check as the README's user: %v", err)
	}
	t.Run("lock", func(t *testing.T) { aclLocks(t, a, b) })
	t.Run("semaphore", func(t *testing.T) { aclSemaphore(t, a, b) })
	t.Run("election", func(t *testing.T) { aclElection(t, a, b) })
	t.Run("admin", func(t *testing.T) { aclAdmin(t, a, b) })
	aclFinish(t, cl.Nodes, a, b)
}

// TestACLMinReplicas: the primitives with MinReplicas (WAIT after every
// acquisition and renewal) as a user created with the README's ACL line.
func TestACLMinReplicas(t *testing.T) {
	srv := redistest.Start(t)
	redistest.StartReplica(t, srv)
	nodes := []*redistest.Server{srv}
	_, a, b := aclSetup(t, nodes, srv.Option(), Options{LeaseTTL: aclLease, MinReplicas: 1})
	if err := a.Check(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Errorf("Check as the README's user: %v", err)
	}
	t.Run("lock", func(t *testing.T) { aclLocks(t, a, b) })
	t.Run("semaphore", func(t *testing.T) { aclSemaphore(t, a, b) })
	t.Run("election", func(t *testing.T) { aclElection(t, a, b) })
	wantNoDenials(t, nodes)
}

// TestACLSentinel: the primitives through Sentinel (which rueidis follows
// with ROLE on the primary it is told of) as a user created with the
// README's ACL line on the primary.
func TestACLSentinel(t *testing.T) {
	srv := redistest.Start(t)
	sn := redistest.StartSentinels(t, srv, 1)
	nodes := []*redistest.Server{srv}
	_, a, b := aclSetup(t, nodes, sn.Option(), Options{LeaseTTL: aclLease})
	if err := a.Check(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Errorf("Check as the README's user: %v", err)
	}
	t.Run("lock", func(t *testing.T) { aclLocks(t, a, b) })
	t.Run("semaphore", func(t *testing.T) { aclSemaphore(t, a, b) })
	t.Run("election", func(t *testing.T) { aclElection(t, a, b) })
	wantNoDenials(t, nodes)
}
