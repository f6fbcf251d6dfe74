package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/machine"
	"github.com/batonlock/baton/internal/script"
)

// Faults: what the world does to the clients, now and then. Each is
// chosen by the run's seed; check.go knows which of them Redis's own
// guarantees do not cover (a lost key is told at the next renewal).

// scheduleFault schedules the next fault.
func (s *Sim) scheduleFault() {
	s.after(s.between(s.cfg.Lease/4, 2*s.cfg.Lease), nil, "fault", func() {
		if s.winding {
			return
		}
		s.fault()
		s.scheduleFault()
	})
}

// fault injects one fault, chosen at random.
func (s *Sim) fault() {
	p := s.procs[s.rng.IntN(len(s.procs))]
	alive := !p.dead && !p.closing
	s.faults++
	switch r := s.rng.IntN(100); {
	case r < 20 && alive:
		s.logf("fault: connection of %s reset", p.short())
		p.resetConn()
	case r < 35 && alive:
		d := s.between(s.cfg.Lease/10, 2*s.cfg.Lease)
		s.logf("fault: process %s stalls for %v", p.short(), d)
		p.stalledTo = s.now.Add(d)
	case r < 50:
		n := s.names[s.rng.IntN(len(s.names))]
		if n.kind != kindLock {
			return
		}
		key := keyspace.LockKey(prefix, n.name)
		s.logf("fault: DEL %s", key)
		s.check.lost(nameKey(n), s.redis.del(key))
	case r < 58:
		s.logf("fault: FLUSHALL")
		s.check.flushed(s.redis.flushAll())
	case r < 70:
		s.forceRelease()
	case r < 78:
		s.restartRedis(s.chance(0.5))
	case r < 86 && alive:
		p.crash()
		s.startProcess()
	case r < 94 && alive:
		ss := p.sessions[s.rng.IntN(len(p.sessions))]
		if !ss.closed {
			s.logf("fault: session %s closes", ss.member[28:])
			ss.close(s.now.Add(ss.lease))
		}
	}
}

// forceRelease is an operator's `baton release -force` of a lock or an
// election.
func (s *Sim) forceRelease() {
	n := s.names[s.rng.IntN(len(s.names))]
	if n.kind == kindSem || n.kind == kindRW {
		return // the operator's tools release permits and read-write holds one by one: not simulated
	}
	id := machine.ID{Name: n.name}
	if n.kind == kindElect {
		id.Kind = machine.ElectKind
	}
	d := s.procs[0].wire
	k := d.Keys(id)
	s.logf("fault: force release of %s", k.Lock)
	s.check.lost(nameKey(n), s.redis.lastFence(k.Lock))
	if n.kind == kindElect {
		s.redis.forceElection(k.Lock)
		return
	}
	s.redis.eval(nil, 0, script.Call{Script: script.Force, Keys: k.List(), Args: []string{d.Via(id), n.name}})
	s.redis.deliver()
}

// restartRedis stops Redis for a moment: every connection drops; with
// keep, its data survives (persistence), else it comes back empty.
func (s *Sim) restartRedis(keep bool) {
	s.logf("fault: Redis restarts (keeps its data: %v)", keep)
	s.redis.up = false
	for _, p := range s.procs {
		if !p.dead {
			p.conn++
			s.redis.drop(p)
			for _, pd := range append([]*pending(nil), p.pending...) {
				pd.finish(nil, machine.Died)
			}
		}
	}
	if !keep {
		s.check.flushed(s.redis.flushAll())
	}
	s.after(s.between(5*time.Millisecond, 200*time.Millisecond), nil, "Redis is back", func() {
		s.redis.up = true
		for _, p := range s.procs {
			if p.dead {
				continue
			}
			conn := p.conn
			s.after(s.between(time.Millisecond, 20*time.Millisecond), p, "reconnected "+p.short(), func() {
				if p.conn != conn || !s.redis.up {
					return
				}
				s.redis.connect(p)
				s.redis.subscribeAll(p)
				p.reconnected()
			})
		}
	})
}

// windDown ends the run: faults stop, every process closes, the events
// left run out (and the leases, after faults), then what is left in
// Redis is checked.
func (s *Sim) windDown() {
	s.winding = true
	s.logf("winding down")
	for _, p := range s.procs {
		p.stalledTo = time.Time{}
		if !p.dead {
			p.closeProcess()
		}
	}
	longest := s.cfg.Lease * 2
	end := s.now.Add(4*longest + machine.LateRun)
	for s.err == nil && s.q.Len() > 0 && s.now.Before(end) {
		s.step()
	}
	if s.err != nil {
		return
	}
	if s.faults > 0 {
		// Keys a crash or a lost reply left lapse with their leases.
		s.now = end
		s.redis.setTime(end)
	}
	s.check.leftovers()
}

// leftover says why a key left after every client closed (at now)
// breaks the promise, or "" for a fence marker. What an excused member
// left (see checker.excused) may stay until it lapses: a holder's hash
// field past its deadline is as good as gone to every script; an
// election value goes at the next campaign, or with the hash.
func leftover(k keyInfo, now time.Time, excused func(member string) bool) string {
	switch {
	case k.typ == "string" && isMarker(k.val):
		return ""
	case k.typ == "hash":
		for f, v := range k.fields {
			switch {
			case f == "#f" || f == "#l":
			case strings.HasPrefix(f, "#") && len(f) > 3 && excused(f[3:]):
			case !strings.HasPrefix(f, "#") && lapsed(v, now):
			default:
				return fmt.Sprintf("hash field %q", f)
			}
		}
		return ""
	}
	return fmt.Sprintf("%s %q", k.typ, k.val)
}

// lapsed reports whether a holder's hash field "<fence>:<deadline ms>" is
// past its deadline.
func lapsed(v string, now time.Time) bool {
	_, dl, ok := strings.Cut(v, ":")
	ms, err := strconv.ParseInt(dl, 10, 64)
	return ok && err == nil && ms <= now.UnixMilli()
}

// clientOf is the client id of a member: its first 32 hex digits.
func clientOf(member string) string {
	if len(member) < 32 {
		return ""
	}
	return member[:32]
}

func isMarker(v string) bool {
	if len(v) < 2 || v[0] != '~' {
		return false
	}
	for _, c := range v[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
