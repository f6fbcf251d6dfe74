package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/batonlock/baton/internal/script"
	"github.com/redis/rueidis"
)

// grants carries the grant messages the subscriber hears, so that each
// hand-off learns the new holder's token from its message, as a grantee
// does, instead of reading the key (which would add a command per call).
var grants = make(chan string, 1)

var evalsha = []string{"evalsha"}

func variants() []variant {
	return []variant{
		{name: "baton's grant as shipped (release.lua, linger mode)", src: script.Release.Src, timed: evalsha,
			setup: grantSetup(members[1] + "|99999999999999|" + leaseMs), call: grantCall(true)},
		{name: "floor: fenced, queued grant, no deadline hash", src: floorGrant, timed: evalsha,
			setup: grantSetup(members[1] + "|" + leaseMs), call: grantCall(false)},
		{name: "unfenced grant (pop, SET, PUBLISH, push)", src: unfencedGrant, timed: evalsha,
			setup: grantSetup(members[1]), call: grantCall(false)},
		{name: "polling lock: SET NX PX + compare-and-delete (two calls)", src: compareAndDelete, timed: []string{"set", "evalsha"},
			setup: func(context.Context, rueidis.Client) error { return nil }, call: pollingCall},
		{name: "baton's permit hand-off as shipped (semrelease.lua, linger mode, limit 4)", src: script.SemRelease.Src, timed: evalsha,
			setup: semSetup, call: semCall},
		{name: "counter semaphore: INCR + DECR (two calls)", timed: []string{"incr", "decr"},
			setup: func(context.Context, rueidis.Client) error { return nil }, call: counterCall},
	}
}

// token is the current holder's token, which the next call releases.
var token string

// grantSetup makes members[0] the holder under fence 100 and queues entry
// (members[1], in the variant's form).
func grantSetup(entry string) func(context.Context, rueidis.Client) error {
	return func(ctx context.Context, c rueidis.Client) error {
		token = members[0] + ":100"
		cmds := rueidis.Commands{
			c.B().Set().Key(key).Value(token).Build(),
			c.B().Rpush().Key(key + ":q").Element(entry).Build(),
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return err
			}
		}
		return nil
	}
}

// grantCall releases the current token in linger mode (the releaser queues
// again) and waits for the grant message.
func grantCall(shipped bool) func(ctx context.Context, c rueidis.Client, sha string) error {
	return func(ctx context.Context, c rueidis.Client, sha string) error {
		m, _, _ := strings.Cut(token, ":")
		keys := []string{key, key + ":q"}
		args := []string{token, m, leaseMs, "2", "C:gc", "n", "5000"}
		if !shipped {
			args[4] = prefix
		}
		res, err := c.Do(ctx, c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).ToArray()
		if err != nil {
			return err
		}
		if n, _ := res[0].AsInt64(); n != 1 {
			return fmt.Errorf("reply %v: not a grant", res)
		}
		msg := <-grants
		f := strings.Fields(msg)
		if len(f) != 3 {
			return fmt.Errorf("grant message %q", msg)
		}
		token = f[1] + ":" + f[0]
		return nil
	}
}

// pollingCall is one acquisition of a polling lock: SET NX PX, then its
// release.
func pollingCall(ctx context.Context, c rueidis.Client, sha string) error {
	if err := c.Do(ctx, c.B().Set().Key(key).Value("tok").Nx().PxMilliseconds(10000).Build()).Error(); err != nil {
		return err
	}
	return c.Do(ctx, c.B().Evalsha().Sha1(sha).Numkeys(1).Key(key).Arg("tok").Build()).Error()
}

// counterCall is one permit of a polling counter semaphore: INCR, then
// its release, DECR.
func counterCall(ctx context.Context, c rueidis.Client, _ string) error {
	if err := c.Do(ctx, c.B().Incr().Key(key).Build()).Error(); err != nil {
		return err
	}
	return c.Do(ctx, c.B().Decr().Key(key).Build()).Error()
}

// semHolders are the permit holders, oldest grant first, and their
// fences; slots[4] is queued. Each hand-off releases the oldest holder's
// permit, which goes to the queued slot, and queues the releaser.
var (
	semHolders []string
	semFences  map[string]string
)

// semSetup makes slots 0-3 hold the 4 permits under fence 100 (deadlines
// far ahead) and queues slot 4.
func semSetup(ctx context.Context, c rueidis.Client) error {
	semHolders, semFences = nil, map[string]string{}
	far := "99999999999999"
	fv := []string{"#f", "100", "#l", "4"}
	for _, m := range slots[:4] {
		semHolders = append(semHolders, m)
		semFences[m] = "100"
		fv = append(fv, m, "100:"+far)
	}
	cmds := rueidis.Commands{
		c.B().Arbitrary("HSET").Keys(semKey).Args(fv...).Build(),
		c.B().Rpush().Key(semKey + ":q").Element(slots[4] + "|" + far + "|" + leaseMs).Build(),
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

// semCall releases the oldest holder's permit in linger mode and waits for
// the grant message.
func semCall(ctx context.Context, c rueidis.Client, sha string) error {
	m := semHolders[0]
	keys := []string{semKey, semKey + ":q"}
	args := []string{m + ":" + semFences[m], m, leaseMs, "2", "C:gc", "s", "5000", "4", ""}
	res, err := c.Do(ctx, c.B().Evalsha().Sha1(sha).Numkeys(2).Key(keys...).Arg(args...).Build()).ToArray()
	if err != nil {
		return err
	}
	if n, _ := res[0].AsInt64(); n != 1 {
		return fmt.Errorf("reply %v: not a grant", res)
	}
	f := strings.Fields(<-grants)
	if len(f) != 3 {
		return fmt.Errorf("grant message %q", f)
	}
	semHolders = append(semHolders[1:], f[1])
	semFences[f[1]] = f[0]
	return nil
}
