// Command grantcost measures what one hand-off costs Redis, script by
// script, on a throwaway redis-server: baton's grant as shipped (release.lua
// in linger mode, as cross-8x2 runs it), the floor of a fenced, queued
// grant (the same pop, clock, SET, PUBLISH and requeue without the deadline
// hash and without TTL checks), an unfenced grant (no clock, no fence), a
// polling lock's two calls (SET NX PX, then a compare-and-delete script);
// then baton's permit hand-off (semrelease.lua in linger mode, as the
// semaphore scenario runs it) and a polling counter's two calls (INCR,
// DECR).
//
// Each variant runs -n calls per round, one caller, in steady state: two
// sessions hand the lock back and forth, each queued behind the other (five
// permit slots share four permits, one queued), with a subscriber on their
// grant channels so that every PUBLISH is heard. The polling variants time
// one uncontended acquisition and release: under contention they add their
// failed attempts, one round trip each.
// Rounds alternate the variants, so that the VM's drift spreads over all of
// them; the medians are printed. "Redis µs" is Redis's own time in the
// command (INFO commandstats, wall clock inside Redis); "CPU µs" is Redis's
// CPU per call (INFO cpu), which adds the round trip's socket work.
//
//	cd bench && go run ./cmd/grantcost
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/batonlock/baton/bench/redisx"
	"github.com/redis/rueidis"
)

// floorGrant is a fenced, queued grant with nothing else: queue entries
// carry the grantee's lease ("<member>|<lease ms>"), liveness is the
// PUBLISH receiver count, the queue's TTL is set only when RPUSH made it.
const floorGrant = `local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then return -1 end
local h = redis.call('LPOP', KEYS[2])
local m, lease = string.match(h, '^(.*)|(%d+)$')
local t = redis.call('TIME')
local us = t[1] * 1000000 + t[2]
local last = tonumber(string.sub(ARGV[1], #ARGV[2] + 2))
if us > last + 1 then last = us else last = last + 1 end
local f = string.format('%.0f', last)
redis.call('SET', KEYS[1], m .. ':' .. f, 'PX', lease)
if redis.call('PUBLISH', ARGV[5] .. string.sub(m, 1, 32), f .. ' ' .. m .. ' ' .. ARGV[6]) == 0 then return -2 end
if redis.call('RPUSH', KEYS[2], ARGV[2] .. '|' .. ARGV[3]) == 1 then redis.call('PEXPIRE', KEYS[2], 2 * ARGV[3]) end
return {1, 1}`

// unfencedGrant pops, sets, publishes and requeues: no clock, no fence.
const unfencedGrant = `local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then return -1 end
local h = redis.call('LPOP', KEYS[2])
redis.call('SET', KEYS[1], h .. ':1', 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[5] .. string.sub(h, 1, 32), '1 ' .. h .. ' ' .. ARGV[6])
redis.call('RPUSH', KEYS[2], ARGV[2])
return {1, 1}`

// compareAndDelete is the polling lock's release.
const compareAndDelete = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

const (
	key     = "gc:{n}"
	prefix  = "gc:c:"
	leaseMs = "10000"
)

var members = [2]string{strings.Repeat("a", 32) + "-1", strings.Repeat("b", 32) + "-1"}

// semKey is the semaphore's hash; slots are five permit slots of five
// clients (each its own grant channel).
const semKey = "gc:s:{s}"

var slots = func() (s []string) {
	for i := range 5 {
		s = append(s, strings.Repeat(strconv.Itoa(i+1), 32)+"-1.0")
	}
	return s
}()

// variant is one way of handing the lock over: setup writes its steady
// state, call makes one hand-off (or one acquisition, for polling).
type variant struct {
	name  string
	src   string   // the script, if any
	timed []string // the commands whose Redis time counts (not those a script calls: the script's time has them)
	setup func(ctx context.Context, c rueidis.Client) error
	call  func(ctx context.Context, c rueidis.Client, sha string) error
}

func main() {
	n := flag.Int("n", 8000, "calls per variant per round")
	rounds := flag.Int("rounds", 9, "rounds (variants alternate within each)")
	bin := flag.String("redis-server", "redis-server", "redis-server binary to start")
	flag.Parse()
	if err := run(*bin, *n, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "grantcost:", err)
		os.Exit(1)
	}
}

func run(bin string, n, rounds int) error {
	if n <= 0 || rounds <= 0 {
		return fmt.Errorf("-n and -rounds must be positive")
	}
	ctx := context.Background()
	srv, err := redisx.Start(ctx, bin)
	if err != nil {
		return err
	}
	defer srv.Stop()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer c.Close()
	sub, cancel := c.Dedicate()
	defer cancel()
	sub.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { grants <- m.Message }})
	channels := []string{prefix + members[0][:32], prefix + members[1][:32]}
	for _, m := range slots {
		channels = append(channels, prefix+m[:32])
	}
	if err := sub.Do(ctx, sub.B().Subscribe().Channel(channels...).Build()).Error(); err != nil {
		return err
	}
	vs := variants()
	redisUs, cpuUs := make([][]float64, len(vs)), make([][]float64, len(vs))
	for range rounds {
		for i, v := range vs {
			r, cpu, err := measure(ctx, c, v, n)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			redisUs[i], cpuUs[i] = append(redisUs[i], r), append(cpuUs[i], cpu)
		}
	}
	fmt.Printf("%d calls per variant per round, %d rounds, one caller; medians (min-max)\n\n", n, rounds)
	fmt.Println("| variant | Redis µs per call | Redis CPU µs per call |")
	fmt.Println("|---|--:|--:|")
	for i, v := range vs {
		fmt.Printf("| %s | %s | %s |\n", v.name, spread(redisUs[i]), spread(cpuUs[i]))
	}
	return nil
}

func spread(xs []float64) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf("%.1f (%.1f-%.1f)", s[len(s)/2], s[0], s[len(s)-1])
}

// measure runs v n times after its setup and returns Redis's time per
// call (commandstats: v.timed) and Redis's CPU per call.
func measure(ctx context.Context, c rueidis.Client, v variant, n int) (redisUs, cpuUs float64, err error) {
	sha := ""
	if v.src != "" {
		if sha, err = c.Do(ctx, c.B().ScriptLoad().Script(v.src).Build()).ToString(); err != nil {
			return 0, 0, err
		}
	}
	if err := c.Do(ctx, c.B().Del().Key(key, key+":q", semKey, semKey+":q").Build()).Error(); err != nil {
		return 0, 0, err
	}
	if err := v.setup(ctx, c); err != nil {
		return 0, 0, err
	}
	if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
		return 0, 0, err
	}
	before, err := info(ctx, c, "cpu")
	if err != nil {
		return 0, 0, err
	}
	for range n {
		if err := v.call(ctx, c, sha); err != nil {
			return 0, 0, err
		}
	}
	after, err := info(ctx, c, "cpu")
	if err != nil {
		return 0, 0, err
	}
	stats, err := info(ctx, c, "commandstats")
	if err != nil {
		return 0, 0, err
	}
	var usec float64
	for _, cmd := range v.timed {
		usec += field(stats, "cmdstat_"+cmd, "usec")
	}
	cpu := (field(after, "used_cpu_user", "") + field(after, "used_cpu_sys", "")) -
		(field(before, "used_cpu_user", "") + field(before, "used_cpu_sys", ""))
	return usec / float64(n), cpu * 1e6 / float64(n), nil
}

func info(ctx context.Context, c rueidis.Client, section string) (string, error) {
	return c.Do(ctx, c.B().Info().Section(section).Build()).ToString()
}

// field reads "name:value" (sub == "") or the sub-field of "name:a=1,b=2"
// from an INFO text; 0 when missing.
func field(txt, name, sub string) float64 {
	for l := range strings.Lines(txt) {
		v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":")
		if !ok {
			continue
		}
		if sub == "" {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
		for kv := range strings.SplitSeq(v, ",") {
			if x, ok := strings.CutPrefix(kv, sub+"="); ok {
				f, _ := strconv.ParseFloat(x, 64)
				return f
			}
		}
	}
	return 0
}
