package baton

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// Hostile Redis: servers that answer with errors (ACL, READONLY, OOM,
// LOADING, a stalled server) and API misuse not covered by input_test.go and
// close_test.go. TestBug_ tests show bugs found while writing these; they
// fail until the bug is fixed.

// minimalACL is the smallest ACL rule set (after "ACL SETUSER <user> on
// >password") with which baton works end to end on Redis 7.0 with the
// default KeyPrefix: its keys and grant channels, the two script commands,
// every command the scripts run, SUBSCRIBE for grants, and what rueidis
// sends on its connections (PING keep-alives, CLIENT TRACKING at connect,
// CLIENT CACHING before tracked reads). HELLO and AUTH need no permission.
// rueidis also probes CLUSTER SLOTS once per client; the denial only shows
// in ACL LOG (it then uses a single-node client), so the rule is left out.
var minimalACL = strings.Fields("resetkeys ~baton:* resetchannels &baton:c:* &baton:g:* -@all " +
	"+evalsha +eval +script|load +subscribe +ping +client|tracking +client|caching " +
	"+get +set +pttl +pexpire +lrem +lindex +lpop +rpush +lpos +hset +hget +hdel +hexists +publish +spublish +time")

// clientCommands are the rules of minimalACL for commands baton and rueidis
// send themselves; the others are the commands the scripts call.
var clientCommands = []string{"+evalsha", "+eval", "+script|load", "+subscribe", "+ping", "+client|tracking", "+client|caching"}

// TestMinimalACLMatchesScripts: minimalACL permits every command the
// scripts call, and nothing they do not (besides clientCommands). With
// Options.MinReplicas, +wait is needed too.
func TestMinimalACLMatchesScripts(t *testing.T) {
	used := map[string]bool{}
	re := regexp.MustCompile(`redis\.call\('([A-Za-z]+)'`)
	for _, s := range []*script{acquireScript, releaseScript, dequeueScript, renewScript} {
		for _, m := range re.FindAllStringSubmatch(s.src, -1) {
			used["+"+strings.ToLower(m[1])] = true
		}
	}
	allowed := map[string]bool{}
	for _, r := range minimalACL {
		if strings.HasPrefix(r, "+") {
			allowed[r] = true
		}
	}
	for cmd := range used {
		if !allowed[cmd] {
			t.Errorf("the scripts call %s, which minimalACL does not allow", cmd[1:])
		}
	}
	for cmd := range allowed {
		if !used[cmd] && !slices.Contains(clientCommands, cmd) {
			t.Errorf("minimalACL allows %s, which nothing uses", cmd[1:])
		}
	}
}

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

// lockOwner returns the owner recorded in name's lock key, or "" when the
// lock is free (no key, or a "~<fence>" marker of a released lock).
func lockOwner(t testing.TB, srv *redistest.Server, prefix, name string) string {
	t.Helper()
	v, err := srv.Do(t, "GET", newKeys(prefix, name).lock).ToString()
	if err != nil || strings.HasPrefix(v, "~") {
		return ""
	}
	return v
}

// wantRedisErr fails unless err wraps a *rueidis.RedisError whose text
// contains word, and says word itself.
// wantRefused checks that Redis refuses name to c with a word error: TryLock
// fails with it, and Lock (which gives up on a permanent error or retries
// until its deadline) fails with it by a 300 ms deadline.
func wantRefused(t *testing.T, ctx context.Context, c *Client, name, word string) {
	t.Helper()
	_, err := c.TryLock(ctx, name)
	wantRedisErr(t, "TryLock", err, word)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Lock(short, name)
	wantRedisErr(t, "Lock", err, word)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Lock took %v with a 300 ms deadline", d)
	}
}

func wantRedisErr(t *testing.T, what string, err error, word string) {
	t.Helper()
	var re *rueidis.RedisError
	switch {
	case err == nil:
		t.Fatalf("%s succeeded, want a %s error", what, word)
	case !errors.As(err, &re):
		t.Fatalf("%s: %v: errors.As finds no *rueidis.RedisError", what, err)
	case !strings.Contains(re.Error(), word) || !strings.Contains(err.Error(), word):
		t.Fatalf("%s: %v: want it to say %s", what, err, word)
	}
}

// exercise runs every path of baton that talks to Redis: acquire, busy,
// queue, dequeue on a deadline, grant by release (PUBLISH to a subscriber),
// renewal, local hand-off, Do, session close and client close.
func exercise(t *testing.T, srv *redistest.Server, ro rueidisOption) {
	t.Helper()
	const lease = 300 * time.Millisecond
	a := newUserClient(t, srv, ro, Options{LeaseTTL: lease})
	b := newUserClient(t, srv, ro, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)

	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if _, err := b.TryLock(ctx, name); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock on a held lock: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := b.Lock(short, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: %v", err)
	}
	cancel()
	got := queuedLock(t, b, ctx, name)
	time.Sleep(2 * lease) // a's hold outlives its lease: renewals must work
	if err := la.Err(); err != nil {
		t.Fatalf("held lock lost: %v (renewal failed?)", err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	lb := waitFor(t, got, 5*time.Second, "b to be granted the lock")
	if lb == nil {
		t.FailNow()
	}
	if st := b.Stats(); st.Granted == 0 {
		t.Fatalf("b got the lock without a grant: %+v", st)
	}
	// Local hand-off between two goroutines of b.
	got2 := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, name)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got2 <- err
	}()
	waitLocalWaiters(t, b.Session(), name, 1)
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := waitFor(t, got2, 5*time.Second, "b's second goroutine"); err != nil {
		t.Fatal(err)
	}
	if err := b.Do(ctx, name, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do: %v", err)
	}
	s, err := a.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Session.Close: %v", err)
	}
	if _, err := a.Lock(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if owner := lockOwner(t, srv, DefaultKeyPrefix, name); owner != "" {
		t.Fatalf("Close left the lock owned by %q", owner)
	}
}

// TestHostileNoScriptPermission: a user that may not run scripts gets
// errors that say NOPERM and wrap the rueidis error; nothing is written.
func TestHostileNoScriptPermission(t *testing.T) {
	srv := redistest.Start(t)
	ro := aclUser(t, srv, "noscript", "~*", "&*", "+@all", "-evalsha", "-eval")
	c := newUserClient(t, srv, ro, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)

	wantRefused(t, ctx, c, name, "NOPERM")

	ran := false
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := c.Do(short, name, func(context.Context) error { ran = true; return nil })
	wantRedisErr(t, "Do", err, "NOPERM")
	if ran {
		t.Fatal("Do ran fn without the lock")
	}
	if n, _ := srv.Do(t, "DBSIZE").AsInt64(); n != 0 {
		t.Fatalf("%d keys written", n)
	}
}

// TestHostileMinimalACL: baton works end to end as a user limited to its
// key prefix, its channels and minimalACL's commands, and Redis denies it
// nothing on the way (but the CLUSTER SLOTS probe of rueidis).
func TestHostileMinimalACL(t *testing.T) {
	srv := redistest.Start(t)
	ro := aclUser(t, srv, "baton", minimalACL...)
	t.Logf("ACL SETUSER baton on >password %s", strings.Join(minimalACL, " "))
	exercise(t, srv, ro)
	var denied []string
	for _, d := range aclDenials(t, srv) {
		if !strings.HasPrefix(d, "command cluster|slots ") {
			denied = append(denied, d)
		}
	}
	if len(denied) > 0 {
		t.Fatalf("ACL denials:\n%s", strings.Join(denied, "\n"))
	}
	// The user is confined: other keys are off limits.
	o := srv.Option()
	o.Username, o.Password, o.DisableCache, o.ForceSingleClient = ro.Username, ro.Password, true, true
	rc, err := rueidis.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	err = rc.Do(ctxTimeout(t, 5*time.Second), rc.B().Get().Key("other:{x}").Build()).Error()
	wantRedisErr(t, "GET of a key outside the prefix", err, "NOPERM")
}

// TestHostileNewWithoutChannelPermission: a user that may SUBSCRIBE but not
// to baton's grant channel (resetchannels) fails New at once, with an error
// that says NOPERM and wraps the *rueidis.RedisError. (Written as a TestBug_:
// New used to wait max(5 s, LeaseTTL) and fail with "subscribing to the
// grant channel timed out"; fixed meanwhile by 3f5bc4f.)
func TestHostileNewWithoutChannelPermission(t *testing.T) {
	srv := redistest.Start(t)
	ro := aclUser(t, srv, "nochannels", "~*", "resetchannels", "+@all")
	start := time.Now()
	c, err := newUserClientErr(srv, ro, Options{LeaseTTL: MinLeaseTTL})
	if err == nil {
		c.Close()
		t.Fatal("New succeeded without permission to subscribe")
	}
	wantRedisErr(t, "New", err, "NOPERM")
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("New took %v to fail", d)
	}
}

// TestHostileReadonlyReplica: a client pointed at a replica fails with
// READONLY (Lock at the latest at its deadline); nothing is written on the
// primary.
func TestHostileReadonlyReplica(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	c := newClient(t, replica, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)

	wantRefused(t, ctx, c, name, "READONLY")
	if n, _ := primary.Do(t, "DBSIZE").AsInt64(); n != 0 {
		t.Fatalf("%d keys on the primary", n)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestHostileOOM: with maxmemory exhausted (noeviction) acquisitions fail
// with OOM, wrapped so errors.As finds the *rueidis.RedisError; a lock held
// from before keeps being renewed; once memory is back, locking works.
func TestHostileOOM(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 600 * time.Millisecond
	c := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	held, err := c.Lock(ctx, name+"-held")
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	if err := srv.Do(t, "CONFIG", "SET", "maxmemory", "1").Error(); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			srv.Do(t, "CONFIG", "SET", "maxmemory", "0")
		}
	}()
	_, err = c.TryLock(ctx, name)
	wantRedisErr(t, "TryLock", err, "OOM")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Lock(short, name) // gives up at once or at its deadline
	wantRedisErr(t, "Lock", err, "OOM")
	time.Sleep(2 * lease) // a window of renewals under OOM
	if err := held.Err(); err != nil {
		t.Fatalf("a lock held from before memory ran out was lost: %v", err)
	}
	if owner := lockOwner(t, srv, DefaultKeyPrefix, name); owner != "" {
		t.Fatalf("failed acquisitions left the lock owned by %q", owner)
	}
	srv.Do(t, "CONFIG", "SET", "maxmemory", "0")
	restored = true
	l, err := c.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock once memory is back: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHostileLoading: while Redis loads its dataset (DEBUG RELOAD, slowed by
// key-load-delay) TryLock fails with LOADING and Lock waits and succeeds
// once loading is done.
func TestHostileLoading(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: time.Second})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	for _, args := range [][]string{
		{"DEBUG", "POPULATE", "5000"},
		{"CONFIG", "SET", "key-load-delay", "200"}, // µs per key: about 1 s
		{"CONFIG", "SET", "loading-process-events-interval-bytes", "1024"},
	} {
		if err := srv.Do(t, args...).Error(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	// DEBUG RELOAD blocks its connection: not the harness client's.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	reloaded := make(chan error, 1)
	go func() { reloaded <- rc.Do(ctx, rc.B().Arbitrary("DEBUG", "RELOAD").Build()).Error() }()
	deadline := time.Now().Add(5 * time.Second)
	for srv.Info(t, "persistence")["loading"] != "1" {
		if time.Now().After(deadline) {
			t.Fatal("Redis never started loading")
		}
		time.Sleep(2 * time.Millisecond) // polls the server's state
	}
	_, err = c.TryLock(ctx, name)
	var re *rueidis.RedisError
	if !errors.As(err, &re) || !re.IsLoading() {
		t.Fatalf("TryLock while loading: %v, want a LOADING error", err)
	}
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock while loading: %v", err)
	}
	if srv.Info(t, "persistence")["loading"] != "0" {
		t.Fatal("Lock succeeded while Redis was still loading")
	}
	if err := waitFor(t, reloaded, 10*time.Second, "DEBUG RELOAD"); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHostileOptionsOutOfRange covers the bounds input_test.go does not.
func TestHostileOptionsOutOfRange(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		opt   Options
		field string // "" when valid
	}{
		{"cohort 1025", Options{CohortLimit: 1025}, "CohortLimit"},
		{"cohort 1024", Options{CohortLimit: 1024}, ""},
		{"cohort 1", Options{CohortLimit: 1}, ""},
		{"closing brace in prefix", Options{KeyPrefix: "a}"}, "KeyPrefix"},
		{"lease just below min", Options{LeaseTTL: MinLeaseTTL - 1}, "LeaseTTL"},
		{"lease min", Options{LeaseTTL: MinLeaseTTL}, ""},
		{"lease 24h", Options{LeaseTTL: 24 * time.Hour}, ""},
		{"lease just above 24h", Options{LeaseTTL: 24*time.Hour + 1}, "LeaseTTL"},
		{"negative replicas", Options{MinReplicas: -1}, "MinReplicas"},
		{"negative replica timeout", Options{ReplicaTimeout: -1}, "ReplicaTimeout"},
		{"replica timeout above lease/3", Options{LeaseTTL: time.Second, ReplicaTimeout: 400 * time.Millisecond}, "ReplicaTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Redis = srv.Option()
			c, err := New(tc.opt)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("New rejected a valid option: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("New accepted it")
			}
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q should match ErrInvalidOptions and name %s", err, tc.field)
			}
		})
	}
	c := newClient(t, srv, Options{LeaseTTL: 2 * time.Second})
	for _, d := range []time.Duration{-time.Second, time.Millisecond, MinLeaseTTL - 1, 24*time.Hour + 1} {
		if s, err := c.NewSession(SessionOptions{LeaseTTL: d}); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "SessionOptions.LeaseTTL") {
			if s != nil {
				s.Close()
			}
			t.Errorf("NewSession(LeaseTTL %v): %v, want ErrInvalidOptions naming SessionOptions.LeaseTTL", d, err)
		}
	}
	s, err := c.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.LeaseTTL() != 2*time.Second {
		t.Fatalf("default session lease %v, want the client's 2s", s.LeaseTTL())
	}
}

// TestHostileClosedClient: every entry point of a closed Client answers
// ErrClosed (or harmlessly) and none panics or touches Redis.
func TestHostileClosedClient(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	s, err := c.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	def := c.Session()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	before := commandCounts(t, srv)
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	if err := c.Do(ctx, "x", fn); !errors.Is(err, ErrClosed) {
		t.Errorf("Do: %v", err)
	}
	if err := c.Do(ctx, "x", nil); err == nil {
		t.Error("Do with nil fn on a closed client succeeded")
	}
	for _, sess := range []*Session{def, s} {
		if _, err := sess.Lock(ctx, "x"); !errors.Is(err, ErrClosed) {
			t.Errorf("Session.Lock: %v", err)
		}
		if _, err := sess.TryLock(ctx, "x"); !errors.Is(err, ErrClosed) {
			t.Errorf("Session.TryLock: %v", err)
		}
		if err := sess.Do(ctx, "x", fn); !errors.Is(err, ErrClosed) {
			t.Errorf("Session.Do: %v", err)
		}
		if err := sess.Close(); err != nil {
			t.Errorf("Session.Close after Client.Close: %v", err)
		}
		select {
		case <-sess.Done():
		default:
			t.Error("session not done after Client.Close")
		}
		if h := sess.Held(); len(h) != 0 {
			t.Errorf("Held: %+v", h)
		}
	}
	if ran {
		t.Error("fn ran on a closed client")
	}
	if st := c.Stats(); st.Held != 0 {
		t.Errorf("Stats after Close: %+v", st)
	}
	after := commandCounts(t, srv)
	for cmd, n := range after {
		if n != before[cmd] && cmd != "info" {
			t.Errorf("%d %s commands sent by a closed client", n-before[cmd], cmd)
		}
	}
}

// TestHostileLockAfterUnlock: a released or lost Lock stays safe to use:
// accessors keep answering, Unlock keeps failing the same way, and closing
// the client changes nothing.
func TestHostileLockAfterUnlock(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: 300 * time.Millisecond})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Token()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lost, err := c.Lock(ctx, name+"-lost")
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "DEL", newKeys(DefaultKeyPrefix, name+"-lost").lock)
	waitFor(t, lost.Done(), 5*time.Second, "the loss")
	check := func(when string) {
		t.Helper()
		if l.Name() != name || l.Token() != tok {
			t.Errorf("%s: name %q token %d, want %q %d", when, l.Name(), l.Token(), name, tok)
		}
		if !errors.Is(l.Err(), ErrUnlocked) || !errors.Is(context.Cause(l.Context()), ErrUnlocked) || l.Context().Err() == nil {
			t.Errorf("%s: Err %v, ctx %v cause %v", when, l.Err(), l.Context().Err(), context.Cause(l.Context()))
		}
		select {
		case <-l.Done():
		default:
			t.Errorf("%s: Done open", when)
		}
		if got, ok := FromContext(l.Context()); !ok || got != l {
			t.Errorf("%s: FromContext lost the lock", when)
		}
		if err := l.Unlock(ctx); !errors.Is(err, ErrUnlocked) {
			t.Errorf("%s: Unlock %v, want ErrUnlocked", when, err)
		}
		if !errors.Is(lost.Err(), ErrLockLost) || lost.Name() != name+"-lost" {
			t.Errorf("%s: lost lock: Err %v name %q", when, lost.Err(), lost.Name())
		}
		if err := lost.Unlock(ctx); !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrUnlocked) {
			t.Errorf("%s: Unlock of a lost lock: %v", when, err)
		}
	}
	check("after Unlock")
	var wg sync.WaitGroup
	for range 4 { // and from several goroutines at once (for -race)
		wg.Go(func() { check("concurrently") })
	}
	wg.Wait()
	c.Close()
	check("after Close")
}

// TestHostileConcurrentUnlockWithWaiters: Unlock called 8 times at once
// while three goroutines of the session wait: one call succeeds, and the
// lock goes to exactly one waiter at a time, with rising tokens.
func TestHostileConcurrentUnlockWithWaiters(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 3
	got := make(chan *Lock, waiters)
	for range waiters {
		go func() {
			l, err := c.Lock(ctx, name)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
	}
	waitLocalWaiters(t, c.Session(), name, waiters)
	unlockConcurrently(t, ctx, l, 8)
	last := l.Token()
	for i := range waiters {
		next := waitFor(t, got, 5*time.Second, "a waiter")
		if next == nil {
			t.FailNow()
		}
		waitLocalWaiters(t, c.Session(), name, waiters-1-i) // nobody else got it
		if next.Token() <= last {
			t.Fatalf("token %d after %d", next.Token(), last)
		}
		last = next.Token()
		if err := next.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostileUnlockRacesClose: Unlock, a waiting Lock and Close at once:
// no panic, only documented errors, and no lock left owned beyond a lease.
func TestHostileUnlockRacesClose(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 500 * time.Millisecond
	for round := range 5 {
		c := newClient(t, srv, Options{LeaseTTL: lease})
		ctx := ctxTimeout(t, 10*time.Second)
		names := []string{uniqueName(t), uniqueName(t), uniqueName(t)}
		var locks []*Lock
		for _, n := range names {
			l, err := c.Lock(ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, l)
		}
		waiter := make(chan error, 1)
		go func() {
			l, err := c.Lock(ctx, names[0])
			if err == nil {
				err = l.Unlock(ctx)
				if errors.Is(err, ErrClosed) || errors.Is(err, ErrUnlocked) {
					err = nil
				}
			} else if errors.Is(err, ErrClosed) {
				err = nil
			}
			waiter <- err
		}()
		waitLocalWaiters(t, c.Session(), names[0], 1)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, l := range locks {
			wg.Go(func() {
				<-start
				if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrUnlocked) {
					t.Errorf("round %d: Unlock racing Close: %v", round, err)
				}
			})
		}
		wg.Go(func() {
			<-start
			if err := c.Close(); err != nil {
				t.Errorf("round %d: Close: %v", round, err)
			}
		})
		close(start)
		wg.Wait()
		if err := waitFor(t, waiter, 5*time.Second, "the waiter"); err != nil {
			t.Fatalf("round %d: waiter: %v", round, err)
		}
		for _, n := range names {
			if owner := lockOwner(t, srv, DefaultKeyPrefix, n); owner != "" {
				// A release that lost the race with the closing connection
				// leaves the key to expire with its lease.
				if pttl, _ := srv.Do(t, "PTTL", newKeys(DefaultKeyPrefix, n).lock).AsInt64(); pttl > lease.Milliseconds() {
					t.Fatalf("round %d: %s still owned by %q with PTTL %d ms", round, n, owner, pttl)
				}
			}
		}
	}
}

// waitStalled returns once srv stops answering (e.g. while DEBUG SLEEP
// runs); it polls the server's state, ordering nothing.
func waitStalled(t *testing.T, srv *redistest.Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(50 * time.Millisecond))
		_, err = io.WriteString(c, "PING\r\n")
		if err == nil {
			buf := make([]byte, 16)
			_, err = c.Read(buf)
		}
		c.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
	}
	t.Fatal("the server never stalled")
}

// stall runs DEBUG SLEEP on srv for d and returns once the server has
// stopped answering; the channel reports when it answers again.
func stall(t *testing.T, srv *redistest.Server, d time.Duration) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- srv.Do(t, "DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', -1, 64)).Error() }()
	waitStalled(t, srv)
	return done
}

// warm makes sure c has its connections open, so that later calls do not
// spend their deadline dialing.
func warm(t *testing.T, c *Client, name string) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	for range 4 {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostileCancelMidFlight: while Redis is stalled, TryLock, Unlock and Do
// return their context's error at its deadline; Unlock still ends the hold
// locally; afterwards the client works.
func TestHostileCancelMidFlight(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	c := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	warm(t, c, name+"-warm")
	held, err := c.Lock(ctx, name+"-held")
	if err != nil {
		t.Fatal(err)
	}
	slept := stall(t, srv, 2*time.Second)
	bounded := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := f(short)
		if d := time.Since(start); d > time.Second { // the stall lasts 2 s
			t.Errorf("%s took %v with a 100 ms deadline", what, d)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want DeadlineExceeded", what, err)
		}
	}
	bounded("TryLock", func(ctx context.Context) error { _, err := c.TryLock(ctx, name+"-try"); return err })
	bounded("Unlock", held.Unlock)
	ran := false
	bounded("Do", func(ctx context.Context) error {
		return c.Do(ctx, name+"-do", func(context.Context) error { ran = true; return nil })
	})
	select {
	case <-held.Done():
	default:
		t.Error("Unlock that timed out left the lock held locally")
	}
	if ran {
		t.Error("Do ran fn without the lock")
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	l, err := c.Lock(ctx, name+"-after")
	if err != nil {
		t.Fatalf("Lock after the stall: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if owner := lockOwner(t, srv, DefaultKeyPrefix, name+"-held"); owner != "" {
		if pttl, _ := srv.Do(t, "PTTL", newKeys(DefaultKeyPrefix, name+"-held").lock).AsInt64(); pttl > lease.Milliseconds() {
			t.Fatalf("the lock whose Unlock timed out is owned by %q for %d ms more", owner, pttl)
		}
	}
}

// TestBug_LockCancelledInFlightLeavesKey: Lock's documentation promises
// that when ctx ends first it "leaves no trace in Redis". When ctx ends
// while an acquire script is in flight (here: Redis stalled by DEBUG SLEEP
// when the script was sent), the script still runs once Redis reads it and
// takes the lock for the session that gave up. Nobody holds it locally, so
// nobody renews or releases it: every other client is locked out for a
// whole lease (5 s here). Cause: Session.acquire treats an error from
// callAcquire as "nothing happened" (lastErr, backoff); giveUp only
// dequeues when ns.queued is set, so an attempt with an unknown outcome is
// never undone (e.g. by running the dequeue script, which releases a key
// owned by the member).
func TestBug_LockCancelledInFlightLeavesKey(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 5 * time.Second
	a := newClient(t, srv, Options{LeaseTTL: lease})
	b := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	warm(t, a, name+"-warm")
	slept := stall(t, srv, time.Second)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := a.Lock(short, name)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock on a stalled server: %v, want DeadlineExceeded", err)
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	owner := lockOwner(t, srv, DefaultKeyPrefix, name)
	start := time.Now()
	bctx, cancel := context.WithTimeout(ctx, lease/2)
	defer cancel()
	lb, err := b.Lock(bctx, name)
	if err != nil {
		t.Fatalf("after a's Lock gave up, the lock stayed owned by %q (a is %s): b could not get it for %v: %v",
			owner, a.id, time.Since(start).Round(time.Millisecond), err)
	}
	lb.Unlock(ctx)
}

// TestNoHandoffAfterDataLoss: after Redis loses its data (FLUSHALL; a
// restart or failover drops the connection, with the same effect), another
// client acquires the name under a fence from the current clock. The old
// holder's Unlock must not then hand the lock to a goroutine of its own
// session under the old fence: that would be an acquisition after b's with
// a lower token. Redis's flush notification (or the dropped connection)
// stops local hand-offs until a renewal confirms the hold.
func TestNoHandoffAfterDataLoss(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{}) // lease 10 s: no renewal during the test
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		l, _ := a.Lock(ctx, name) // nil at the test's end
		got <- l
	}()
	waitLocalWaiters(t, a.Session(), name, 1)
	srv.Do(t, "FLUSHALL") // Redis loses every lock
	// Wait until a has heard of the flush (tracking pushes it).
	s := a.Session()
	waitSession(t, s, func() bool { n := s.names[name]; return n != nil && n.st == held && n.hold.suspect },
		func() string { return "a never heard of the flush" })
	lb, err := b.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock after the data loss: %v", err)
	}
	before := a.Stats().LocalHandoffs
	if err := la.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock of a lock Redis lost: %v, want ErrLockLost", err)
	}
	if a.Stats().LocalHandoffs != before {
		t.Fatal("a handed a lock Redis had lost to its own goroutine")
	}
	lb.Unlock(ctx)
	next := waitFor(t, got, 5*time.Second, "a's second goroutine")
	if next == nil {
		t.FailNow()
	}
	if next.Token() <= lb.Token() {
		t.Fatalf("a's goroutine acquired after b with token %d, below b's %d", next.Token(), lb.Token())
	}
	next.Unlock(ctx)
}

// TestBug_InvalidationDuringAcquireIsLost: a tracking invalidation that
// reaches a waiter while its acquire script is in flight is lost. Redis
// reports the change (here a DEL of the lock key that ran right after the
// script read it), onInvalidations sets ns.recheck to 5 ms and wakes the
// head waiter, but the busy reply then sets ns.recheck to the key's old
// TTL, so the waiter sleeps through the wake-up: on a free lock, for up to a
// lease (10 s here). Seen in about 1 of 30 runs of TestAwkwardNames, where
// the invalidation for an earlier tracked read arrives on one connection
// while the next attempt's reply is still unhandled on another. The test
// delivers the invalidation itself (c.onInvalidations, as rueidis would) at
// that moment, while Redis is stalled. Cause: onInvalidations ignores
// ns.busy; grants have ns.pending for this case, invalidations nothing.
func TestBug_InvalidationDuringAcquireIsLost(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 60*time.Second)
	for attempt := 0; attempt < 5; attempt++ {
		name := uniqueName(t)
		key := newKeys(DefaultKeyPrefix, name).lock
		warm(t, a, name+"-warm")
		msg, err := srv.Do(t, "ECHO", key).ToMessage() // an invalidation names the key
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		qa := onQueue(a)
		slept := stall(t, srv, time.Second)
		got := make(chan *Lock, 1)
		go func() {
			// An error (the test's end) leaves l nil: nothing to report.
			l, _ := a.Lock(ctx, name)
			got <- l
		}()
		waitBusy(t, a.Session(), name)
		// DEL, queued behind a's script: when Redis wakes it reads the key
		// (busy) and then deletes it, and tells a.
		del, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(del, "DEL "+key+"\r\n")
		a.onInvalidations([]rueidis.RedisMessage{msg})
		if err := <-slept; err != nil {
			t.Fatal(err)
		}
		del.SetDeadline(time.Now().Add(5 * time.Second))
		reply := make([]byte, 8)
		n, _ := del.Read(reply)
		del.Close()
		select {
		case <-qa: // a's attempt found the lock held: the interleaving happened
		case l := <-got:
			// DEL ran first and a's script found the lock free: try again.
			t.Logf("attempt %d: DEL ran first (%q)", attempt, reply[:n])
			if l == nil {
				t.Fatal("a's Lock failed")
			}
			l.Unlock(ctx)
			lb.Unlock(ctx)
			continue
		}
		start := time.Now()
		select {
		case l := <-got:
			t.Logf("woken %v after the invalidation", time.Since(start))
			if l == nil {
				t.Fatal("a's Lock failed")
			}
			l.Unlock(ctx)
			lb.Unlock(ctx)
			return
		case <-time.After(3 * time.Second):
		}
		s := a.Session()
		s.mu.Lock()
		recheck := time.Until(s.names[name].recheck)
		s.mu.Unlock()
		lb.Unlock(ctx) // lost: its key is gone; wakes nobody
		t.Fatalf("the lock is free (DEL replied %q) and a's waiter was told, but it sleeps on: next look in %v", reply[:n], recheck.Round(time.Millisecond))
	}
	t.Fatal("the interleaving never happened")
}

// waitBusy waits (on the session's state, under its mutex) until an acquire
// script for name is in flight.
func waitBusy(t *testing.T, s *Session, name string) {
	t.Helper()
	waitSession(t, s, func() bool { return s.names[name] != nil && s.names[name].st == acquiring },
		func() string { return "no acquire in flight" })
}

// TestBug_TryLockSharesItsLockWithAWaiter: mutual exclusion breaks inside
// one session. A Lock call that starts while a TryLock of the same session
// and name is in flight queues locally; when the TryLock succeeds,
// Session.tryOnce calls install, whose handTo gives the new Lock to the head
// local waiter, and tryOnce returns the same Lock to the TryLock caller too:
// two goroutines hold one *Lock (the same token) at once, and the second
// Unlock fails with ErrUnlocked. Found by TestChaosLatency with
// BATON_CHAOS_DURATION=20s (20-40 ms of latency widens the window); here
// Redis is stalled while the TryLock is in flight.
func TestBug_TryLockSharesItsLockWithAWaiter(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	warm(t, c, name+"-warm")
	slept := stall(t, srv, time.Second)
	type result struct {
		l   *Lock
		err error
	}
	tried := make(chan result, 1)
	go func() {
		l, err := c.TryLock(ctx, name)
		tried <- result{l, err}
	}()
	waitBusy(t, c.Session(), name)
	locked := make(chan *Lock, 1)
	go func() {
		l, _ := c.Lock(ctx, name) // nil at the test's end
		locked <- l
	}()
	waitLocalWaiters(t, c.Session(), name, 1)
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	r := waitFor(t, tried, 5*time.Second, "TryLock")
	if r.err != nil {
		t.Fatalf("TryLock on a free lock: %v", r.err)
	}
	select {
	case l := <-locked:
		same := l == r.l
		errTry, errLock := r.l.Unlock(ctx), l.Unlock(ctx)
		t.Fatalf("Lock returned while TryLock's lock was held (same *Lock: %v, tokens %d and %d); Unlock: %v, then %v",
			same, r.l.Token(), l.Token(), errTry, errLock)
	case <-time.After(500 * time.Millisecond): // a window in which Lock must not return
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := waitFor(t, locked, 5*time.Second, "Lock after the TryLock holder unlocked")
	if l == nil || l.Token() <= r.l.Token() {
		t.Fatalf("Lock after TryLock: %v", l)
	}
	l.Unlock(ctx)
}
