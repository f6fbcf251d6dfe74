package batonhttp

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/batonlock/baton"
)

// processJSON is the process scope's body; see the package doc.
type processJSON struct {
	Scope    string        `json:"scope"` // "process"
	Error    string        `json:"error,omitempty"`
	Instance string        `json:"instance"`
	Prefix   string        `json:"prefix"`
	Redis    []string      `json:"redis"`
	Sessions []sessionJSON `json:"sessions"`
	Stats    statsJSON     `json:"stats"`

	read time.Time // for the HTML page: when the view was read, for the times relative to it
}

type sessionJSON struct {
	ID         string        `json:"id"`
	Default    bool          `json:"default"`
	LeaseTTLMs int64         `json:"lease_ttl_ms"`
	Held       []heldJSON    `json:"held"`
	Waiting    []waitingJSON `json:"waiting"`
}

type heldJSON struct {
	Kind          string `json:"kind"` // lock, semaphore (a permit), election (the leadership)
	Name          string `json:"name"`
	Token         string `json:"token"`
	Owner         string `json:"owner"`
	AcquiredAt    string `json:"acquired_at"`
	LeaseDeadline string `json:"lease_deadline"`

	acquired, deadline time.Time // for the HTML page
}

type waitingJSON struct {
	Name       string `json:"name"`
	Goroutines int    `json:"goroutines"`
}

// statsJSON is baton.Stats with stable snake_case names.
type statsJSON struct {
	Acquired      uint64 `json:"acquired"`
	LocalHandoffs uint64 `json:"local_handoffs"`
	Granted       uint64 `json:"granted"`
	Cached        uint64 `json:"cached"`
	Waits         uint64 `json:"waits"`
	Timeouts      uint64 `json:"timeouts"`
	Lost          uint64 `json:"lost"`
	RenewalErrors uint64 `json:"renewal_errors"`
	Held          int    `json:"held"`
}

// processView reads c's sessions and counters. Each session is read on
// its own, so a lock that moves between two sessions during the read may
// show in both or neither; the view is for people, not for decisions.
func processView(c *baton.Client) processJSON {
	v := processJSON{Scope: "process", Instance: c.Instance(), Redis: []string{}, Sessions: []sessionJSON{}, Stats: statsView(c.Stats()), read: time.Now()}
	if a := c.Admin(); a != nil {
		v.Prefix, v.Redis = a.Prefix(), addrs(a)
	}
	def := c.Session()
	for _, s := range c.Sessions() {
		v.Sessions = append(v.Sessions, sessionView(s, s == def))
	}
	return v
}

func sessionView(s *baton.Session, isDefault bool) sessionJSON {
	sv := sessionJSON{
		ID:         s.ID(),
		Default:    isDefault,
		LeaseTTLMs: s.LeaseTTL().Milliseconds(),
		Held:       []heldJSON{},
		Waiting:    []waitingJSON{},
	}
	held := s.Held()
	slices.SortFunc(held, func(a, b baton.HeldLock) int { return cmp.Compare(a.Name, b.Name) })
	for _, l := range held {
		sv.Held = append(sv.Held, heldJSON{
			Kind:          l.Kind.String(),
			Name:          l.Name,
			Token:         strconv.FormatUint(l.Token, 10),
			Owner:         l.Owner,
			AcquiredAt:    timeString(l.AcquiredAt),
			LeaseDeadline: timeString(l.Deadline),
			acquired:      l.AcquiredAt,
			deadline:      l.Deadline,
		})
	}
	for name, n := range s.Waiting() {
		sv.Waiting = append(sv.Waiting, waitingJSON{Name: name, Goroutines: n})
	}
	slices.SortFunc(sv.Waiting, func(a, b waitingJSON) int { return cmp.Compare(a.Name, b.Name) })
	return sv
}

func statsView(st baton.Stats) statsJSON {
	return statsJSON{
		Acquired:      st.Acquired,
		LocalHandoffs: st.LocalHandoffs,
		Granted:       st.Granted,
		Cached:        st.Cached,
		Waits:         st.Waits,
		Timeouts:      st.Timeouts,
		Lost:          st.Lost,
		RenewalErrors: st.RenewalErrors,
		Held:          st.Held,
	}
}

// timeString formats t in UTC as RFC 3339 with nanoseconds, and "" for the
// zero time. UTC makes the views of instances in several zones comparable.
func timeString(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
