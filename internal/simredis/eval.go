package simredis

import "github.com/batonlock/baton/internal/script"

// scriptFunc is a script's Go twin: its reply (int64, string, nil, []any
// or Error) for KEYS and ARGV.
type scriptFunc func(r *run, keys, argv []string) any

// Scripts by name: the names of internal/script's variables.
var byName = map[string]*script.Script{
	"Acquire":    script.Acquire,
	"Release":    script.Release,
	"Dequeue":    script.Dequeue,
	"Renew":      script.Renew,
	"Force":      script.Force,
	"SemAcquire": script.SemAcquire,
	"SemRelease": script.SemRelease,
	"SemDequeue": script.SemDequeue,
	"ElectRead":  script.ElectRead,
	"RWAcquire":  script.RWAcquire,
	"RWRelease":  script.RWRelease,
	"RWDequeue":  script.RWDequeue,
}

// Script returns the script of internal/script named name ("Acquire",
// "SemRelease", ...), or nil.
func Script(name string) *script.Script { return byName[name] }

func twin(sc *script.Script) scriptFunc {
	switch sc {
	case script.Acquire:
		return acquire
	case script.Release:
		return releaseLock
	case script.Dequeue:
		return dequeue
	case script.Renew:
		return renew
	case script.Force:
		return force
	case script.SemAcquire:
		return semacquire
	case script.SemRelease:
		return semrelease
	case script.SemDequeue:
		return semdequeue
	case script.ElectRead:
		return electread
	case script.RWAcquire:
		return rwacquire
	case script.RWRelease:
		return rwrelease
	case script.RWDequeue:
		return rwdequeue
	}
	return nil
}

// Eval runs script sc with keys and args as connection c's EVALSHA would,
// after CLIENT CACHING YES when track is set (on a connection without
// tracking that is Redis's error, and the script runs untracked, as in a
// pipeline). It returns the script's reply, or its error reply as an
// Error: "BATONFOREIGN ...", "BATONLIMIT ...", "WRONGTYPE ..." (Redis
// adds the script's line, the model does not). It panics on a script
// that is not one of internal/script's.
func (s *Server) Eval(c ClientID, sc *script.Script, keys, args []string, track bool) (res any, err error) {
	f := twin(sc)
	if f == nil {
		panic("simredis: Eval of a script that is not baton's")
	}
	r := &s.r // no call runs inside another
	*r = run{s: s, c: s.conns[c], keys: keys}
	if track {
		if r.c == nil || !r.c.tracking {
			track = false // CLIENT CACHING failed: Redis does not track the call
		}
		r.track = track
	}
	defer catch(&err)
	res = f(r, keys, args)
	if e, ok := res.(Error); ok {
		return nil, e
	}
	return res, nil
}

// catch turns an error raised in a script or command into *err.
func catch(err *error) {
	if p := recover(); p != nil {
		e, ok := p.(raised)
		if !ok {
			panic(p)
		}
		*err = e.err
	}
}
