package baton

import (
	"regexp"
	"slices"
	"strings"

	"github.com/batonlock/baton/internal/adminscript"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/script"
	"github.com/batonlock/baton/internal/wire"
	"github.com/redis/rueidis"
)

// What Check asks Redis about: the commands baton sends (those its Lua
// calls are read from the scripts themselves), its keys and its channels.

// scriptSources are the Lua baton runs as the library's user: the
// scripts of internal/script (Force is Client.Admin's ForceRelease) and
// admin's read script (Client.Admin's Inspect and List).
func scriptSources() []string {
	out := []string{adminscript.Read}
	for _, s := range []*script.Script{script.Acquire, script.Release, script.Dequeue, script.Renew, script.Force,
		script.SemAcquire, script.SemRelease, script.SemDequeue, script.ElectRead} {
		out = append(out, s.Src)
	}
	return out
}

// scriptCall matches a command a script calls, spelled as a literal (a
// test in acl_test.go fails on any other spelling).
var scriptCall = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z_]+)['"]`)

// scriptCommands returns the commands the scripts call, lower case, sorted.
func scriptCommands() []string {
	var out []string
	for _, src := range scriptSources() {
		for _, m := range scriptCall.FindAllStringSubmatch(src, -1) {
			if cmd := strings.ToLower(m[1]); !slices.Contains(out, cmd) {
				out = append(out, cmd)
			}
		}
	}
	slices.Sort(out)
	return out
}

// deployment says which conditional commands a client needs.
type deployment struct {
	cluster, sentinel, tracking, replicas, redis8 bool
}

// goSent are the commands baton's Go code and rueidis send on baton's
// connections, as ACL rules, with when they are needed (nil: always).
// TestCheckCommandsDerived keeps this list equal to what the sources send.
var goSent = []struct {
	cmd  string
	when func(d deployment) bool
}{
	{"evalsha", nil}, {"eval", nil}, {"script|load", nil}, {"set", nil}, {"ping", nil},
	{"subscribe", nil}, {"unsubscribe", nil},
	{"client|tracking", func(d deployment) bool { return d.tracking }},
	{"client|caching", func(d deployment) bool { return d.tracking }},
	{"wait", func(d deployment) bool { return d.replicas }},
	{"role", func(d deployment) bool { return d.sentinel }},
	{"ssubscribe", func(d deployment) bool { return d.cluster }},
	{"sunsubscribe", func(d deployment) bool { return d.cluster }},
	{"cluster|slots", func(d deployment) bool { return d.cluster }},
	{"cluster|shards", func(d deployment) bool { return d.cluster && d.redis8 }},
	{"asking", func(d deployment) bool { return d.cluster }},
}

// scriptOnlyWhen are the script commands a deployment may not need: the
// scripts choose SPUBLISH only on Redis Cluster.
var scriptOnlyWhen = map[string]func(d deployment) bool{
	"spublish": func(d deployment) bool { return d.cluster },
}

// commandsFor returns the commands d needs, as ACL rules without '+',
// sorted.
func commandsFor(d deployment) []string {
	var out []string
	for _, cmd := range scriptCommands() {
		if when := scriptOnlyWhen[cmd]; when == nil || when(d) {
			out = append(out, cmd)
		}
	}
	for _, s := range goSent {
		if (s.when == nil || s.when(d)) && !slices.Contains(out, s.cmd) {
			out = append(out, s.cmd)
		}
	}
	slices.Sort(out)
	return out
}

// probe is one question to redis.acl_check_cmd: may the user run argv?
type probe struct {
	cmd  string   // the command argv runs, as an ACL rule without '+'
	argv []string // the command line
	on   string   // "key K" or "channel C": what argv's argument is, "" if it names none of baton's
	rule string   // for on: the rule that allows it ("~baton:*", "&baton:c:*")
	late bool     // CLUSTER SHARDS: needed on Redis 8 or later only
}

// probeName is the name Check asks about: its keys and channels are named
// in questions, never written.
const probeName = "baton-check"

// Which commands take channels, and how: each argument (subscribers) or
// the first (publishers). Every other command is asked about with a key
// and zeros after it, so that Redis finds its keys where it looks for
// them (an argument list too short for a command's key positions is not
// safe to ask about).
var (
	subscribers = []string{"subscribe", "unsubscribe", "ssubscribe", "sunsubscribe"}
	publishers  = []string{"publish", "spublish"}
	// allKeys are commands whose every argument is a key.
	allKeys = []string{"del", "exists", "unlink", "touch"}
	// shardCommands are those of shard channels (Redis Cluster).
	shardCommands = []string{"spublish", "ssubscribe", "sunsubscribe"}
)

// probes lists c's questions: each command, with its arguments on one of
// baton's keys, or on each of baton's channels it is sent to; each key
// through EVAL and EVALSHA (which need read and write access to their
// keys, as baton's scripts do); CLUSTER SHARDS on Cluster, which checkNode
// counts on Redis 8 or later only.
func (c *Client) probes() []probe {
	prefix := c.prefix
	key := keyspace.LockKey(prefix, probeName)
	keys := []string{key, key + ":q", key + ":c",
		keyspace.SemKey(prefix, probeName), keyspace.SemKey(prefix, probeName) + ":q",
		keyspace.ElectKey(prefix, probeName), keyspace.ElectKey(prefix, probeName) + ":q",
		keyspace.InstanceKey(prefix, c.id),
	}
	type channel struct {
		name, kind string
		shard      bool
	}
	chans := []channel{{c.channel, "c", false}, {wire.ElectChannel(prefix, probeName), "e", c.sharded}}
	if c.sharded {
		chans = append(chans, channel{keyspace.GrantChannel(prefix, probeName), "g", true}, channel{wire.SemGrantChannel(prefix, probeName), "g", true})
	}
	var ps []probe
	for _, cmd := range commandsFor(c.deployment()) {
		sub, pub := slices.Contains(subscribers, cmd), slices.Contains(publishers, cmd)
		if !sub && !pub {
			argv := append(strings.Split(cmd, "|"), key, "0", "0", "0", "0", "0")
			if slices.Contains(allKeys, cmd) {
				argv = []string{cmd, key} // every argument is a key: the zeros would be keys outside the prefix
			}
			p := probe{cmd: cmd, argv: argv, on: "key " + key, rule: "~" + prefix + ":*"}
			if cmd == "eval" || cmd == "evalsha" {
				p.on, p.rule = "", "" // key is the script, and the zero after it says: no keys
			}
			ps = append(ps, p)
			continue
		}
		for _, ch := range chans {
			if ch.shard != slices.Contains(shardCommands, cmd) {
				continue
			}
			argv := []string{cmd, ch.name}
			if pub {
				argv = append(argv, "x")
			}
			ps = append(ps, probe{cmd: cmd, argv: argv, on: "channel " + ch.name, rule: "&" + prefix + ":" + ch.kind + ":*"})
		}
	}
	for _, k := range keys {
		for _, cmd := range []string{"eval", "evalsha"} {
			ps = append(ps, probe{cmd: cmd, argv: []string{cmd, strings.Repeat("0", 40), "1", k}, on: "key " + k, rule: "~" + prefix + ":*"})
		}
	}
	if c.sharded {
		ps = append(ps, probe{cmd: "cluster|shards", argv: []string{"cluster", "shards"}, late: true})
	}
	return ps
}

// deployment is what c runs on, but for the server's version (CLUSTER
// SHARDS is asked about apart: see probes).
func (c *Client) deployment() deployment {
	return deployment{
		cluster:  c.sharded,
		sentinel: c.rc.Mode() == rueidis.ClientModeSentinel,
		tracking: c.tracking,
		replicas: c.replicas > 0,
	}
}
