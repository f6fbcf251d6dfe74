package baton

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// Check asks every Redis node the client reaches whether the user it
// logged in as may do everything baton may need in this deployment: run
// the commands its scripts call (read from the scripts) and its code sends
// (those of Redis Cluster, Sentinel, tracking and MinReplicas only where
// they apply), read and write its keys ("~<prefix>:*") and use its
// channels ("&<prefix>:c:*", "&<prefix>:e:*", on Cluster "&<prefix>:g:*").
// It covers locks, semaphores, elections, Observe and Client.Admin's
// Inspect and ForceRelease, and writes nothing: one script per node asks
// Redis's ACL (redis.acl_check_cmd) about a probe name,
// "<prefix>:{baton-check}", its companion keys and channels. A refusal
// returns an error matching ErrNoPermission that names the user, the node
// and each missing rule as ACL SETUSER spells it (+time, ~baton:*,
// &baton:c:*); other errors (Redis unreachable) come back as they are.
// Check needs Redis 7.0 or later: before, it returns an error matching
// errors.ErrUnsupported.
//
// New does not call Check: a service that only locks may run with a user
// that lacks what elections need, and a rule removed later shows only at
// the call that needs it. Call Check at start-up (the README's quick start
// does) to fail there, with every missing rule named at once, rather than
// at a first contended Lock. After Close it returns ErrClosed.
func (c *Client) Check(ctx context.Context) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	ps := c.probes()
	nodes := c.rc.Nodes()
	var errs []error
	for _, addr := range slices.Sorted(maps.Keys(nodes)) {
		if err := c.checkNode(ctx, addr, nodes[addr], ps); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkLua asks redis.acl_check_cmd about each command line in ARGV (each
// preceded by its length) and returns the server's version, then per line
// 1 (allowed), 0 (refused) or 2 (a command the server does not know); {-1}
// on a server without redis.acl_check_cmd (before 7.0). It writes nothing.
const checkLua = `if not redis.acl_check_cmd then return {-1} end
local out, i = {redis.REDIS_VERSION_NUM}, 1
while i <= #ARGV do
	local n = tonumber(ARGV[i])
	local ok, allowed = pcall(redis.acl_check_cmd, unpack(ARGV, i + 1, i + n))
	if not ok then out[#out + 1] = 2 elseif allowed then out[#out + 1] = 1 else out[#out + 1] = 0 end
	i = i + n + 1
end
return out`

// checkNode asks node n at addr the questions ps and says what it refused.
func (c *Client) checkNode(ctx context.Context, addr string, n rueidis.Client, ps []probe) error {
	var args []string
	for _, p := range ps {
		args = append(append(args, strconv.Itoa(len(p.argv))), p.argv...)
	}
	ans, err := runCheck(ctx, n, args)
	if err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "NOPERM") {
			return fmt.Errorf("%w: %s at %s lacks +eval, +evalsha (ACL SETUSER %s +eval +evalsha, on every node; the README's ACL line has them all); Check, as baton, runs scripts: %w",
				ErrNoPermission, c.userName(), addr, cmp.Or(c.user, "<user>"), err)
		}
		return fmt.Errorf("baton: check permissions at %s: %w", addr, err)
	}
	if len(ans) == 1 && ans[0] == -1 {
		return fmt.Errorf("baton: check permissions at %s: Redis before 7.0 has no redis.acl_check_cmd: %w", addr, errors.ErrUnsupported)
	}
	if len(ans) != len(ps)+1 {
		return fmt.Errorf("baton: check permissions at %s: %d answers to %d questions", addr, len(ans)-1, len(ps))
	}
	missing := refused(ps, ans[1:], ans[0] >= 0x080000)
	if len(missing) == 0 {
		return nil
	}
	var fix []string
	for _, m := range missing {
		if r := strings.Fields(m)[0]; len(strings.Fields(m)) == 1 || strings.HasPrefix(m, r+" (for ") {
			fix = append(fix, r)
		}
	}
	how := "the README's ACL line has them all"
	if len(fix) > 0 {
		how = fmt.Sprintf("ACL SETUSER %s %s, on every node; the README's ACL line has them all", cmp.Or(c.user, "<user>"), strings.Join(fix, " "))
	}
	return fmt.Errorf("%w: %s at %s lacks %s (%s)", ErrNoPermission, c.userName(), addr, strings.Join(missing, ", "), how)
}

// runCheck runs checkLua with args on n: by EVAL, or if the user may not
// EVAL, by EVALSHA after loading it.
func runCheck(ctx context.Context, n rueidis.Client, args []string) ([]int64, error) {
	ans, err := n.Do(ctx, n.B().Eval().Script(checkLua).Numkeys(0).Arg(args...).Build()).AsIntSlice()
	if re, ok := rueidis.IsRedisErr(err); !ok || !strings.HasPrefix(re.Error(), "NOPERM") {
		return ans, err
	}
	sha, lerr := n.Do(ctx, n.B().ScriptLoad().Script(checkLua).Build()).ToString()
	if lerr != nil {
		return nil, err
	}
	ans, lerr = n.Do(ctx, n.B().Evalsha().Sha1(sha).Numkeys(0).Arg(args...).Build()).AsIntSlice()
	if lerr != nil {
		return nil, err
	}
	return ans, nil
}

// refused names the rules the answers ans to ps show missing, each once,
// in the order of ps: a command refused where its key or channel is
// allowed ("+time"), a key or channel refused where its command is allowed
// ("~baton:* (for key baton:s:{baton-check})"). A key counts as allowed
// when EVAL or EVALSHA may use it (read and write, as baton's scripts).
// A question whose command and key or channel are both refused everywhere
// names both when no other question told which. CLUSTER SHARDS counts only
// on Redis 8 or later (redis8).
func refused(ps []probe, ans []int64, redis8 bool) []string {
	cmdOK, onOK := map[string]bool{}, map[string]bool{}
	for i, p := range ps {
		if ans[i] == 0 {
			continue
		}
		cmdOK[p.cmd] = true
		// Redis checks no channel of an unsubscribe, and a key only as
		// baton's scripts use it: read and written, as EVAL declares.
		if strings.HasPrefix(p.on, "channel ") && !strings.HasSuffix(p.cmd, "unsubscribe") || p.cmd == "eval" || p.cmd == "evalsha" {
			onOK[p.on] = true
		}
	}
	var out []string
	ons := map[string][]string{} // what each key or channel rule was refused for
	var both []probe
	for i, p := range ps {
		if ans[i] != 0 || p.late && !redis8 {
			continue
		}
		switch cmdBad, onBad := !cmdOK[p.cmd], p.on != "" && !onOK[p.on]; {
		case cmdBad && onBad:
			both = append(both, p)
		case cmdBad:
			out = appendNew(out, "+"+p.cmd)
		case onBad:
			if !slices.Contains(ons[p.rule], p.on) {
				ons[p.rule] = append(ons[p.rule], p.on)
			}
			out = appendNew(out, p.rule)
		default: // a rule that allows the command on some keys only
			out = appendNew(out, fmt.Sprintf("+%s on %s", p.cmd, strings.TrimPrefix(p.on, "key ")))
		}
	}
	for _, p := range both {
		if !slices.Contains(out, p.rule) && !slices.Contains(out, "+"+p.cmd) {
			out = appendNew(out, fmt.Sprintf("+%s or %s", p.cmd, p.rule))
		}
	}
	for i, r := range out {
		if w := ons[r]; len(w) > 0 {
			out[i] += " (for " + w[0]
			if len(w) > 1 {
				out[i] += fmt.Sprintf(" and %d more", len(w)-1)
			}
			out[i] += ")"
		}
	}
	return out
}

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// userName names the user the client logged in as, for messages.
func (c *Client) userName() string {
	if c.user == "" {
		return "the Redis user"
	}
	return fmt.Sprintf("user %q", c.user)
}
