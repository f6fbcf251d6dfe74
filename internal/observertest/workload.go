// Package observertest is the scripted workload that the Observer
// adapters (the otel and prometheus modules) check their figures against:
// two clients against a throwaway Redis, whose every step is known, with
// locks, a semaphore and elections.
package observertest

import (
	"context"
	"sync"
	"testing"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
)

// Workload is what Run did, for the checks of the figures.
type Workload struct {
	Stats    [2]baton.Stats // after Close
	Acquired [2]int         // locks, permits and leaderships the calls of each client got
	Waits    [2]int         // Waiting events of each client
	Granted  uint64         // token of the lock c2 got by grant, after waiting

	// Figures are what each client's calls of each primitive did, indexed
	// by client and baton.Primitive (index 0 is unused: every event of the
	// script is about a name).
	Figures [2][nPrimitives]Figures
}

// Primitives are the primitives the script uses, in the order of
// baton.Primitive.
var Primitives = []baton.Primitive{baton.PrimitiveLock, baton.PrimitiveSemaphore, baton.PrimitiveElection}

const nPrimitives = int(baton.PrimitiveElection) + 1

// Label values the adapters give how, reason, outcome and end.
var (
	Hows = []string{"free", "handoff", "granted"} // a lock's (and "cached"); a permit's or leadership's are PermitHows
	// PermitHows are how a semaphore's permit or an election's leadership
	// is acquired: never passed between goroutines nor cached.
	PermitHows = []string{"free", "granted"}
	Reasons    = []string{"timeout", "canceled", "closed", "error"}
	Outcomes   = []string{"acquired", "timeout", "canceled", "closed", "error"}
	Ends       = []string{"released", "closed", "lost"}
)

// Figures are what one client's calls of one primitive did: the counts an
// adapter must show for it. Every map has every label value, zeros too.
type Figures struct {
	Acquired map[string]int // acquisitions, by how (Hows)
	GaveUp   map[string]int // waiting calls that returned without, by reason (Reasons)
	Waits    map[string]int // calls that went to sleep, by outcome (Outcomes)
	Ends     map[string]int // holds that ended, by end (Ends); "lost" is the losses
}

func newFigures(p baton.Primitive) Figures {
	zero := func(keys []string) map[string]int {
		m := make(map[string]int, len(keys))
		for _, k := range keys {
			m[k] = 0
		}
		return m
	}
	hows := Hows
	if p != baton.PrimitiveLock {
		hows = PermitHows
	}
	return Figures{Acquired: zero(hows), GaveUp: zero(Reasons), Waits: zero(Outcomes), Ends: zero(Ends)}
}

// Moment is a point of the script at which an adapter's gauges must show
// exactly Held and Waiting, indexed by client and baton.Primitive.
type Moment struct {
	What    string
	Held    [2][nPrimitives]int
	Waiting [2][nPrimitives]int
}

// Names of the scripted steps: locks but for the semaphore SemName and the
// elections ElectName and LostLeaderName.
const (
	GrantName      = "granted"
	BusyName       = "busy"
	LostName       = "lost"
	CloseName      = "close"
	SemName        = "sem"
	SemLimit       = 2
	ElectName      = "leader"
	LostLeaderName = "lost-leader"
)

// PrimitiveOf returns what the script uses name as.
func PrimitiveOf(name string) baton.Primitive {
	switch name {
	case SemName:
		return baton.PrimitiveSemaphore
	case ElectName, LostLeaderName:
		return baton.PrimitiveElection
	}
	return baton.PrimitiveLock
}

// Run drives two clients, observed by obs[0] and obs[1], through a
// script, and closes them. Client 2's scripted calls use ctx. At each
// Moment of the script Run calls at (if not nil) with the gauges it
// expects.
//
//  1. contention: 4 goroutines per client, rounds Lock/Unlock each on
//     three names;
//  2. client 2 waits for GrantName, held by client 1, and gets it by grant;
//  3. client 1 holds BusyName (until step 8): client 2's TryLock fails, a
//     Lock with a 200ms deadline times out, a Lock is cancelled once
//     waiting;
//  4. client 1's LostName is deleted from outside: lost;
//  5. semaphore SemName of SemLimit 2: client 1 takes both permits, client
//     2's TryAcquire fails, its Acquire waits (a Moment) and gets the permit
//     client 1 releases by grant; its second Acquire is cancelled once
//     waiting; both release;
//  6. election ElectName: client 1 leads, client 2 campaigns (a Moment);
//     client 1 resigns and client 2 leads by grant; client 1 campaigns
//     again;
//  7. client 2 holds CloseName and leads, and waits for BusyName (a
//     Moment) when it is closed: client 1 leads by grant (the failover, a
//     Moment);
//  8. client 1 leads LostLeaderName in a session of short lease; its key is
//     deleted from outside: lost;
//  9. client 1 releases BusyName and is closed, leading ElectName.
func Run(t *testing.T, ctx context.Context, obs [2]baton.Observer, rounds int, at func(Moment)) Workload {
	t.Helper()
	s := newScript(t, ctx, obs, at)
	s.contention(rounds)
	s.grant()
	busy := s.busy()
	s.loss()
	s.semaphore()
	following := s.election()
	s.closeLeader(following)
	s.lostLeader()
	s.end(busy)
	return s.finish()
}

// script is the state of one Run.
type script struct {
	t    *testing.T
	ctx  context.Context // client 2's scripted calls
	bg   context.Context
	srv  *redistest.Server
	cs   [2]*baton.Client
	tees [2]*tee
	at   func(Moment)

	mu      sync.Mutex // protects acquired during the contention
	lockAcq [2]int     // locks the calls of each client got
	w       Workload
}

func newScript(t *testing.T, ctx context.Context, obs [2]baton.Observer, at func(Moment)) *script {
	t.Helper()
	s := &script{t: t, ctx: ctx, bg: context.Background(), srv: redistest.Start(t), at: at}
	for i := range s.cs {
		s.tees[i] = &tee{t: t, next: obs[i]}
		c, err := baton.New(baton.Options{Redis: s.srv.Option(), Observer: s.tees[i]})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		s.cs[i] = c
	}
	for i := range s.w.Figures {
		for _, p := range Primitives {
			s.w.Figures[i][p] = newFigures(p)
		}
	}
	return s
}

// fig returns the figures of client i's calls of primitive p.
func (s *script) fig(i int, p baton.Primitive) *Figures { return &s.w.Figures[i][p] }

// moment hands m to the test.
func (s *script) moment(m Moment) {
	s.t.Helper()
	if s.at != nil {
		s.at(m)
	}
}

// finish fills in what only the totals tell of the locks, checks the
// figures against the clients' Stats, and returns the workload.
func (s *script) finish() Workload {
	t, w := s.t, &s.w
	for i, c := range s.cs {
		st := c.Stats()
		w.Stats[i] = st
		waits := s.tees[i].waiting()
		// Permits and leaderships are never handed off: every hand-off and
		// every grant the script did not make is a lock's.
		lock := s.fig(i, baton.PrimitiveLock)
		lock.Acquired["handoff"] = int(st.LocalHandoffs)
		lock.Acquired["granted"] = int(st.Granted)
		lock.Acquired["cached"] = int(st.Cached) // only locks are cached
		for _, p := range Primitives[1:] {
			f := s.fig(i, p)
			lock.Acquired["granted"] -= f.Acquired["granted"]
			if n := sum(f.Waits); n != waits[p] {
				t.Errorf("client %d: %d Waiting events of %s, the script made %d", i+1, waits[p], p, n)
			}
		}
		lock.Acquired["free"] = s.lockAcq[i] - lock.Acquired["handoff"] - lock.Acquired["granted"] - lock.Acquired["cached"]
		lock.Waits["acquired"] = waits[baton.PrimitiveLock] - (sum(lock.Waits) - lock.Waits["acquired"])
		lock.Ends["released"] = s.lockAcq[i] - (sum(lock.Ends) - lock.Ends["released"])

		var acquired, lost, timeouts, waited int
		for _, p := range Primitives {
			f := s.fig(i, p)
			acquired += sum(f.Acquired)
			lost += f.Ends["lost"]
			timeouts += f.GaveUp["timeout"] + f.GaveUp["canceled"]
			waited += f.Waits["acquired"]
			w.Waits[i] += sum(f.Waits)
			for _, m := range []map[string]int{f.Acquired, f.Waits, f.Ends} {
				for k, n := range m {
					if n < 0 {
						t.Errorf("client %d: %s %s = %d: Stats disagree with the script", i+1, p, k, n)
					}
				}
			}
			if a, e := sum(f.Acquired), sum(f.Ends); a != e {
				t.Errorf("client %d: %d acquisitions of %s, %d ends", i+1, a, p, e)
			}
		}
		w.Acquired[i] = acquired
		for _, c := range []struct {
			what      string
			got, want int
		}{
			{"Stats.Acquired", int(st.Acquired), acquired},
			{"Stats.Lost", int(st.Lost), lost},
			{"Stats.Timeouts", int(st.Timeouts), timeouts},
			{"Stats.Waits", int(st.Waits), waited},
			{"Stats.Held", st.Held, 0},
		} {
			if c.got != c.want {
				t.Errorf("client %d: %s = %d, the script made %d", i+1, c.what, c.got, c.want)
			}
		}
	}
	t.Logf("stats: %+v; waits %v", w.Stats, w.Waits)
	return *w
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
