// Package script holds baton's Lua scripts and sends them: by SHA
// (EVALSHA), loading them once per node after NOSCRIPT, in pipelines, with
// CLIENT CACHING before a Call whose reads Redis should track, and with
// WAIT after calls whose writes replicas must acknowledge.
//
// The KEYS contract: every script but Renew takes the two keys of one
// name, in this order: the lock key "<prefix>:{<name>}" (holding
// "<member>:<fence>" while held, "~<fence>" for an hour once free) and the
// queue of waiting sessions "<prefix>:{<name>}:q" (entries
// "<member>|<deadline ms>|<lease ms>", see handoff.lua). They share the
// name's hash tag, so one script may touch both on Redis Cluster; so
// does the lock key's cache mark "<lock key>:c" (the value a session keeps
// cached, see release.lua and common.lua's cachedby), which the lock
// scripts derive from the lock key.
// Renew takes such keys for many names of one slot. The semaphore scripts
// (SemAcquire, SemRelease, SemDequeue) take a semaphore's hash
// "<prefix>:s:{<name>}" (see semcommon.lua) in the lock key's place, then
// its queue; so do they for an election's hash
// "<prefix>:e:{<name>}", given its announce channel. ElectRead takes an
// election's hash alone. Each script's header says its ARGV and its reply.
package script

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

var (
	//go:embed common.lua
	commonLua string
	//go:embed handoff.lua
	handoffLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed release.lua
	releaseLua string
	//go:embed dequeue.lua
	dequeueLua string
	//go:embed renew.lua
	renewLua string
	//go:embed force.lua
	forceLua string
	//go:embed semcommon.lua
	semcommonLua string
	//go:embed semacquire.lua
	semacquireLua string
	//go:embed semrelease.lua
	semreleaseLua string
	//go:embed semdequeue.lua
	semdequeueLua string
	//go:embed electread.lua
	electreadLua string
)

// The scripts.
var (
	Acquire = newScript(acquireLua) // take a lock, or queue for it
	Release = newScript(releaseLua) // release a lock, granting it to the next queued session
	Dequeue = newScript(dequeueLua) // leave a queue, passing on what was granted meanwhile
	Renew   = newScript(renewLua)   // extend held locks and queue entries of many names
	Force   = newScript(forceLua)   // take a lock from its holder (admin), granting it as Release does

	SemAcquire = newScript(semacquireLua, semcommonLua) // take a permit of a semaphore, or queue for one
	SemRelease = newScript(semreleaseLua, semcommonLua) // return a permit, granting free ones FIFO
	SemDequeue = newScript(semdequeueLua, semcommonLua) // leave a semaphore's queue, passing on a permit granted meanwhile
	ElectRead  = newScript(electreadLua)                // read an election's leader and its value
)

// Script is a Lua script sent by SHA1, and in full only when the server
// answers NOSCRIPT (after a restart or SCRIPT FLUSH). rueidis.Lua's ExecMulti
// loads scripts on every Call, so the pipelined paths use this instead.
type Script struct {
	Src string // the text sent on NOSCRIPT: common.lua spliced in
	sha string
}

// newScript puts the shared helpers (common.lua, then more, such as the
// semaphore helpers) where body says --@common, or at its top, and the
// hand-off helpers (handoff.lua) where it says --@handoff, or with them.
func newScript(body string, more ...string) *Script {
	helpers := commonLua + strings.Join(more, "")
	if before, after, ok := strings.Cut(body, "--@handoff\n"); ok {
		body = before + handoffLua + after
	} else {
		helpers = handoffLua + helpers
	}
	src := helpers + body
	if before, after, ok := strings.Cut(body, "--@common\n"); ok {
		src = before + helpers + after
	}
	sum := sha1.Sum([]byte(src))
	return &Script{Src: src, sha: hex.EncodeToString(sum[:])}
}

func (s *Script) evalsha(b rueidis.Builder, keys, args []string) rueidis.Completed {
	return b.Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func (s *Script) eval(b rueidis.Builder, keys, args []string) rueidis.Completed {
	return b.Eval().Script(s.Src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// Call is one script invocation in a pipeline.
type Call struct {
	Script     *Script
	Keys, Args []string
	Track      bool // precede it with CLIENT CACHING YES (as Pipe.OptIn does for every call)
}

// Pipe says how RunMulti sends its calls.
type Pipe struct {
	OptIn    bool          // precede each Call with CLIENT CACHING YES, so Redis tracks the keys it reads
	Replicas int           // when > 0, follow the calls with WAIT replicas timeout
	Timeout  time.Duration // WAIT's timeout
}

// RunMulti sends calls in one pipeline on one connection and resends with
// EVAL those that hit NOSCRIPT. With p.Replicas set it also returns how many
// replicas acknowledged every write of the calls (WAIT runs on the same
// connection, after them); otherwise acked is -1.
func RunMulti(ctx context.Context, rc rueidis.Client, p Pipe, calls ...Call) (res []rueidis.RedisResult, acked int64) {
	res, acked = send(ctx, rc, p, calls, (*Script).evalsha)
	return resendNoScript(ctx, rc, p, calls, res, acked)
}

// resendNoScript sends again the calls whose result res says NOSCRIPT:
// after loading their scripts, by SHA, and by text if flushed again.
func resendNoScript(ctx context.Context, rc rueidis.Client, p Pipe, calls []Call, res []rueidis.RedisResult, acked int64) ([]rueidis.RedisResult, int64) {
	var retry []Call
	var idx []int
	for i, r := range res {
		if err, ok := rueidis.IsRedisErr(r.Error()); ok && err.IsNoScript() {
			retry = append(retry, calls[i])
			idx = append(idx, i)
		}
	}
	if len(retry) == 0 {
		return res, acked
	}
	// Load each missing script once on every node, then retry by SHA: a
	// batch of renewals would otherwise resend its full text per call.
	build := (*Script).evalsha
	if loadScripts(ctx, rc, retry) != nil {
		build = (*Script).eval
	}
	again, acked2 := send(ctx, rc, p, retry, build)
	for j, i := range idx {
		res[i] = again[j]
	}
	// Flushed again between the load and the retry: send the text.
	var last []Call
	var lastIdx []int
	for _, i := range idx {
		if err, ok := rueidis.IsRedisErr(res[i].Error()); ok && err.IsNoScript() {
			last = append(last, calls[i])
			lastIdx = append(lastIdx, i)
		}
	}
	if len(last) > 0 {
		final, acked3 := send(ctx, rc, p, last, (*Script).eval)
		for j, i := range lastIdx {
			res[i] = final[j]
		}
		acked2 = min(acked2, acked3)
	}
	// The first WAIT covered the calls that ran then; the second, the rest.
	return res, min(acked, acked2)
}

// Preload loads every script of baton's on every node of rc, in one
// pipelined round trip per node, so that no call pays a NOSCRIPT round
// trip and a load on its first use (three round trips on a slow link).
// Calls still recover from NOSCRIPT (a restart, a failover, SCRIPT FLUSH).
func Preload(ctx context.Context, rc rueidis.Client) error {
	all := []*Script{Acquire, Release, Dequeue, Renew, SemAcquire, SemRelease, SemDequeue, ElectRead}
	var errs []error
	for _, n := range rc.Nodes() {
		cmds := make(rueidis.Commands, 0, len(all))
		for _, sc := range all {
			cmds = append(cmds, n.B().ScriptLoad().Script(sc.Src).Build())
		}
		for _, r := range n.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	return errors.Join(errs...)
}

func loadScripts(ctx context.Context, rc rueidis.Client, calls []Call) error {
	seen := map[*Script]bool{}
	for _, c := range calls {
		if seen[c.Script] {
			continue
		}
		seen[c.Script] = true
		for _, n := range rc.Nodes() {
			if err := n.Do(ctx, n.B().ScriptLoad().Script(c.Script.Src).Build()).Error(); err != nil {
				return err
			}
		}
	}
	return nil
}

func send(ctx context.Context, rc rueidis.Client, p Pipe, calls []Call, build func(*Script, rueidis.Builder, []string, []string) rueidis.Completed) ([]rueidis.RedisResult, int64) {
	b := rc.B()
	// rueidis recycles commands once sent: a resend needs new ones.
	commands := func() rueidis.Commands {
		cmds := make(rueidis.Commands, 0, 2*len(calls)+1)
		for _, c := range calls {
			if p.OptIn || c.Track {
				cmds = append(cmds, b.ClientCaching().Yes().Build())
			}
			cmds = append(cmds, build(c.Script, b, c.Keys, c.Args))
		}
		if p.Replicas > 0 {
			cmds = append(cmds, b.Wait().Numreplicas(int64(p.Replicas)).Timeout(p.Timeout.Milliseconds()).Build())
		}
		return cmds
	}
	var res []rueidis.RedisResult
	cmds := commands()
	if p.Replicas > 0 && rc.Mode() == rueidis.ClientModeCluster {
		// One connection to the slot's node for the writes and their WAIT:
		// a redirected script must not leave WAIT counting on the old node
		// (the redirect comes back as an error, and callers try again).
		for try := 1; ; try++ {
			rc.Dedicated(func(dc rueidis.DedicatedClient) error {
				res = dc.DoMulti(ctx, cmds...)
				return nil
			})
			if try == 3 || !moved(res) || ctx.Err() != nil {
				break
			}
			// The slot moved and nothing was written: rueidis learns the
			// new owner; try there.
			t := time.NewTimer(time.Duration(try) * 10 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			cmds = commands()
		}
	} else if len(cmds) == 1 {
		res = []rueidis.RedisResult{rc.Do(ctx, cmds[0])}
	} else {
		res = rc.DoMulti(ctx, cmds...)
	}
	acked := int64(-1)
	if p.Replicas > 0 {
		n, err := res[len(res)-1].AsInt64()
		if err == nil {
			acked = n
		}
		res = res[:len(res)-1]
	}
	// Drop the CLIENT CACHING replies.
	k := 0
	for i, c := range calls {
		if p.OptIn || c.Track {
			k++
		}
		res[i] = res[k]
		k++
	}
	return res[:len(calls)], acked
}

func moved(res []rueidis.RedisResult) bool {
	for _, r := range res {
		if err, ok := rueidis.IsRedisErr(r.Error()); ok {
			if _, m := err.IsMoved(); m {
				return true
			}
		}
	}
	return false
}

// Run is RunMulti for one call.
func Run(ctx context.Context, rc rueidis.Client, p Pipe, s *Script, keys, args []string) (rueidis.RedisResult, int64) {
	if !p.OptIn && p.Replicas == 0 {
		// The hot path: one EVALSHA, without RunMulti's slices.
		res := rc.Do(ctx, s.evalsha(rc.B(), keys, args))
		if err, ok := rueidis.IsRedisErr(res.Error()); !ok || !err.IsNoScript() {
			return res, -1
		}
		all, acked := resendNoScript(ctx, rc, p, []Call{{Script: s, Keys: keys, Args: args}}, []rueidis.RedisResult{res}, -1)
		return all[0], acked
	}
	res, acked := RunMulti(ctx, rc, p, Call{Script: s, Keys: keys, Args: args})
	return res[0], acked
}

// denied matches Redis's error for a command, channel or key that the ACL
// user may not use inside a script, and the script line that made it.
var (
	denied   = regexp.MustCompile(`can't (run this command or subcommand|publish to the channel|access at least one of the keys)`)
	lineOf   = regexp.MustCompile(`@user_script:(\d+)`)
	callOnLn = regexp.MustCompile(`redis\.p?call\('([A-Za-z]+)'`)
)

// Explain turns Redis's refusal of a command inside s (an ACL without it:
// Redis names neither the command nor NOPERM) into an error that names the
// command and what to do, wrapping err so that errors.As still reaches the
// Redis error. Other errors come back as they are. A script that reads a
// key with redis.pcall, to tell a key of another type (WRONGTYPE) from
// other errors, raises the others on the same line, so that this finds the
// command.
func (s *Script) Explain(err error) error {
	m := denied.FindStringSubmatch(errorText(err))
	if m == nil {
		return err
	}
	what := "a command"
	if l := lineOf.FindStringSubmatch(err.Error()); l != nil {
		lines := strings.Split(s.Src, "\n")
		if n, _ := strconv.Atoi(l[1]); n >= 1 && n <= len(lines) {
			if c := callOnLn.FindStringSubmatch(lines[n-1]); c != nil {
				what = strings.ToUpper(c[1])
			}
		}
	}
	switch m[1] {
	case "publish to the channel":
		what = "publishing to a channel (" + what + ")"
	case "access at least one of the keys":
		what = "a key (" + what + ")"
	}
	return fmt.Errorf("NOPERM: the Redis user may not use %s, which baton's scripts need; give it the ACL rules in baton's README (ACL SETUSER ... see \"Redis permissions\"): %w", what, err)
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Ints reads a script's reply: an array of integers, or the single
// integer a fast path returns (a table costs Lua more), as one of one.
func Ints(res rueidis.RedisResult) (vals []int64, single bool, err error) {
	if m, merr := res.ToMessage(); merr == nil && m.IsInt64() {
		n, _ := m.AsInt64()
		return []int64{n}, true, nil
	}
	vals, err = res.AsIntSlice()
	return vals, false, err
}
