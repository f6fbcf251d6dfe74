package baton

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"

	"github.com/redis/rueidis"
)

var (
	//go:embed common.lua
	commonLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed release.lua
	releaseLua string
	//go:embed dequeue.lua
	dequeueLua string
	//go:embed renew.lua
	renewLua string
)

var (
	acquireScript = newScript(acquireLua)
	releaseScript = newScript(releaseLua)
	dequeueScript = newScript(dequeueLua)
	renewScript   = newScript(renewLua)
)

// script is a Lua script sent by SHA1, and in full only when the server
// answers NOSCRIPT (after a restart or SCRIPT FLUSH). rueidis.Lua's ExecMulti
// loads scripts on every call, so the pipelined paths use this instead.
type script struct {
	src, sha string
}

func newScript(body string) *script {
	src := commonLua + body
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

func (s *script) evalsha(b rueidis.Builder, keys, args []string) rueidis.Completed {
	return b.Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func (s *script) eval(b rueidis.Builder, keys, args []string) rueidis.Completed {
	return b.Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// call is one script invocation in a pipeline.
type call struct {
	s          *script
	keys, args []string
}

// runMulti sends calls in one pipeline, optionally behind CLIENT CACHING YES
// (which makes Redis track the keys the first call reads), and resends with
// EVAL those that hit NOSCRIPT.
func runMulti(ctx context.Context, rc rueidis.Client, optIn bool, calls ...call) []rueidis.RedisResult {
	b := rc.B()
	cmds := make(rueidis.Commands, 0, len(calls)+1)
	if optIn {
		cmds = append(cmds, b.ClientCaching().Yes().Build())
	}
	for _, c := range calls {
		cmds = append(cmds, c.s.evalsha(b, c.keys, c.args))
	}
	res := rc.DoMulti(ctx, cmds...)
	if optIn {
		res = res[1:]
	}
	var retry []int
	for i, r := range res {
		if err, ok := rueidis.IsRedisErr(r.Error()); ok && err.IsNoScript() {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return res
	}
	cmds = cmds[:0]
	if optIn {
		cmds = append(cmds, b.ClientCaching().Yes().Build())
	}
	for _, i := range retry {
		cmds = append(cmds, calls[i].s.eval(b, calls[i].keys, calls[i].args))
	}
	again := rc.DoMulti(ctx, cmds...)
	if optIn {
		again = again[1:]
	}
	for j, i := range retry {
		res[i] = again[j]
	}
	return res
}

func run(ctx context.Context, rc rueidis.Client, optIn bool, s *script, keys, args []string) rueidis.RedisResult {
	return runMulti(ctx, rc, optIn, call{s, keys, args})[0]
}
