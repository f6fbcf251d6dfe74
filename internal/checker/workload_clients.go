package checker

// The workload's Clients and Sessions: making them, learning their
// members in Redis, picking one for an operation, naming them in messages.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batonlock/baton"
)

type wclient struct {
	slot, gen  int
	label      string
	lease      time.Duration
	c          *baton.Client
	def        *wsession
	extra      []*wsession // live extra sessions (r.mu)
	all        []*wsession // every session it had (r.mu)
	closeStart time.Time   // r.mu
	closeEnd   time.Time   // r.mu
}

type wsession struct {
	cl    *wclient
	label string
	lease time.Duration
	s     *baton.Session

	member string // Session.ID; probe and learn confirm it from Held (r.mu)
	// The first Close that reached it: its own or its Client's (r.mu).
	closeStart, closeEnd time.Time
	closedBy             string
	closeErr             error
	holds                []*whold // r.mu
	ops                  sync.WaitGroup
	killed               time.Time // a child's: when it was killed (r.mu)
}

// newClient makes the Client of slot (generation gen) and its extra
// sessions.
func (r *wrun) newClient(slot, gen int, rng *rand.Rand) (*wclient, error) {
	label := fmt.Sprintf("c%d", slot)
	if gen > 0 {
		label += "#" + strconv.Itoa(gen)
	}
	o := r.cfg.Options(slot)
	o.LeaseTTL = r.cfg.Leases[slot]
	o.KeyPrefix = r.cfg.KeyPrefix
	o.Redis.ClientName = r.clientName(label) // oracle (l) finds its connections by it
	if r.cfg.Bursts != nil {
		o.Observer = r.observer(o.Observer) // how each acquisition was made (the cache shape's checks)
	}
	var c *baton.Client
	var err error
	for try := 0; ; try++ {
		start := time.Now()
		if c, err = baton.New(o); err == nil {
			break
		}
		// New fails while a fault cuts Redis off: that is documented.
		if try == 5 || !r.inFault(start, time.Now()) {
			return nil, fmt.Errorf("checker: client %d: %w", slot, err)
		}
		time.Sleep(50 * time.Millisecond) // pace the retries
	}
	cl := &wclient{slot: slot, gen: gen, label: label, lease: o.LeaseTTL, c: c}
	r.mu.Lock()
	cl.def = r.addSessionLocked(cl, c.Session(), o.LeaseTTL)
	r.mu.Unlock()
	r.probe(cl.def)
	var extra []*wsession
	for range r.cfg.Sessions {
		lease := r.cfg.SessionLeases[rng.IntN(len(r.cfg.SessionLeases))]
		s, err := c.NewSession(baton.SessionOptions{LeaseTTL: lease})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("checker: session of client %d: %w", slot, err)
		}
		r.mu.Lock()
		ws := r.addSessionLocked(cl, s, lease)
		r.mu.Unlock()
		r.probe(ws)
		extra = append(extra, ws)
	}
	r.mu.Lock()
	cl.extra = extra
	r.clients = append(r.clients, cl)
	r.mu.Unlock()
	return cl, nil
}

func (r *wrun) addSessionLocked(cl *wclient, s *baton.Session, lease time.Duration) *wsession {
	r.nsess++
	ws := &wsession{cl: cl, s: s, lease: lease, label: fmt.Sprintf("%s.s%d[%v]", cl.label, len(cl.all), lease)}
	// Permits name their slots "<member>.<slot>" in Redis: the member is
	// known from the start (Session.ID), not only once a lock was held.
	ws.member = s.ID()
	r.members[ws.member] = ws
	cl.all = append(cl.all, ws)
	r.sessions = append(r.sessions, ws)
	return ws
}

// probe learns the member (identity in Redis) of a new session: it takes a
// name of its own, reads the owner from Held and releases it. Without it,
// Redis entries of the session cannot be told apart from others'.
func (r *wrun) probe(ws *wsession) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.mu.Lock()
	name := fmt.Sprintf("%s-probe-%d", r.cfg.KeyPrefix, r.nsess)
	r.mu.Unlock()
	l, err := ws.s.TryLock(ctx, name)
	if err != nil {
		return // learnt at its first acquisition, if any
	}
	r.learn(ws, l, name)
	l.Unlock(ctx)
}

// learn records the member of ws from the owner token Held lists for l.
func (r *wrun) learn(ws *wsession, l *baton.Lock, name string) {
	for _, hl := range ws.s.Held() {
		if hl.Token == l.Token() && hl.Name == name {
			if i := strings.LastIndexByte(hl.Owner, ':'); i > 0 {
				r.mu.Lock()
				ws.member = hl.Owner[:i]
				r.members[ws.member] = ws
				r.mu.Unlock()
			}
		}
	}
}

// pick returns a live session of slot (registered as in use: the caller
// must call ws.ops.Done), or nil.
func (r *wrun) pick(slot int, rng *rand.Rand) *wsession {
	r.mu.Lock()
	defer r.mu.Unlock()
	cl := r.slots[slot]
	ws := cl.def
	if len(cl.extra) > 0 && rng.IntN(2) == 0 {
		ws = cl.extra[rng.IntN(len(cl.extra))]
	}
	if !ws.closeStart.IsZero() {
		return nil
	}
	ws.ops.Add(1)
	return ws
}

func (r *wrun) labels(members []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.labelsLocked(members)
}

// labelsLocked names sessions by their members; "?" begins an unknown one.
func (r *wrun) labelsLocked(members []string) []string {
	out := make([]string, len(members))
	for i, m := range members {
		if ws := r.members[m]; ws != nil {
			out[i] = ws.label
		} else {
			out[i] = "?" + truncate(m)
		}
	}
	return out
}

func truncate(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}
