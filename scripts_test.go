package baton

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/batonlock/baton/internal/script"
	"github.com/redis/rueidis"
)

// The scripts and the Redis permissions baton needs: minimalACL, checked
// against the commands the scripts call, and baton run end to end as a user
// it confines.

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
	for _, s := range []*script.Script{script.Acquire, script.Release, script.Dequeue, script.Renew} {
		for _, m := range re.FindAllStringSubmatch(s.Src, -1) {
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
