package batonprom

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonlock/baton"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultBuckets are the histogram buckets unless Options.Buckets is set,
// in seconds: from 100µs (a local hand-off) to 5 minutes.
var DefaultBuckets = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// Options configure a Collector. The zero value selects every default.
type Options struct {
	// NameLabel, if set, maps a name (of a lock, a semaphore or an
	// election) to the value of a label "name" added to every metric about
	// a name (all but baton_lock_renewal_errors_total). Its results must be
	// few (a name's kind, not the name): each distinct value is a set of
	// series per primitive, kept as long as the Collector. It must be safe
	// for concurrent use. Default nil: no name label.
	NameLabel func(name string) string

	// ConstLabels are added to every series, for instance to tell apart the
	// Collectors of several Clients in one registry. They must not be
	// named primitive, how, reason, outcome, end, name or le. Default none.
	ConstLabels prometheus.Labels

	// Buckets are the upper bounds of both histograms' buckets, in seconds,
	// increasing. Default DefaultBuckets.
	Buckets []float64
}

// Collector counts a Client's events (of locks, semaphore permits and
// election leaderships, told apart by the label primitive); it implements
// baton.Observer and prometheus.Collector. Create it with New; the zero
// value is not usable. It is safe for concurrent use.
//
// Give each Client its own Collector: one shared by several Clients reports
// their sums, and two registered in one registry must differ in
// Options.ConstLabels.
type Collector struct {
	wait      *prometheus.HistogramVec // primitive, outcome[, name]
	hold      *prometheus.HistogramVec // primitive, end[, name]
	acquired  *prometheus.CounterVec   // primitive, how[, name]
	gaveUp    *prometheus.CounterVec   // primitive, reason[, name]
	losses    *prometheus.CounterVec   // primitive[, name]
	renewErrs prometheus.Counter       // no primitive: a renewal serves every name of a session
	held      *prometheus.GaugeVec     // primitive[, name]
	waiting   *prometheus.GaugeVec     // primitive[, name]

	nameLabel func(string) string
	plain     group // the series without a name, used when nameLabel is nil
	labels    groupCache
}

// New builds a Collector. It fails if a ConstLabels name is invalid or
// taken, or Buckets are not increasing.
func New(opt Options) (*Collector, error) {
	if opt.Buckets == nil {
		opt.Buckets = DefaultBuckets
	}
	if len(opt.Buckets) == 0 || !increasing(opt.Buckets) {
		return nil, fmt.Errorf("batonprom: Buckets %v are not increasing", opt.Buckets)
	}
	if _, ok := opt.ConstLabels["le"]; ok {
		return nil, errors.New(`batonprom: ConstLabels: "le" is reserved for histogram buckets`)
	}
	var name []string
	if opt.NameLabel != nil {
		name = []string{"name"}
	}
	plain := append([]string{"primitive"}, name...)
	with := func(l string) []string { return append([]string{"primitive", l}, name...) }
	cl := opt.ConstLabels
	c := &Collector{
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_lock_wait_seconds", ConstLabels: cl, Buckets: opt.Buckets,
			Help: "How long Lock, Acquire and Campaign calls waited (those that had to), by primitive and outcome.",
		}, with("outcome")),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_lock_hold_seconds", ConstLabels: cl, Buckets: opt.Buckets,
			Help: "How long locks, permits and leaderships were held, by primitive and how they ended.",
		}, with("end")),
		acquired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_lock_acquisitions_total", ConstLabels: cl,
			Help: "Locks, permits and leaderships acquired, by primitive and how.",
		}, with("how")),
		gaveUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_lock_gave_up_total", ConstLabels: cl,
			Help: "Lock, Acquire and Campaign calls that returned without the lock, permit or leadership, by primitive and reason.",
		}, with("reason")),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_lock_losses_total", ConstLabels: cl,
			Help: "Held locks, permits and leaderships lost before Unlock, by primitive.",
		}, plain),
		renewErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_lock_renewal_errors_total", ConstLabels: cl,
			Help: "Renewal round trips that failed and were retried.",
		}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_lock_held", ConstLabels: cl,
			Help: "Locks, permits and leaderships held now, by primitive.",
		}, plain),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_lock_waiting", ConstLabels: cl,
			Help: "Lock, Acquire and Campaign calls waiting now, by primitive.",
		}, plain),
		nameLabel: opt.NameLabel,
	}
	// A throwaway registry reports what is wrong with the descriptions
	// (label names) before any series is made.
	if err := prometheus.NewRegistry().Register(c); err != nil {
		return nil, fmt.Errorf("batonprom: ConstLabels: %w", err)
	}
	if c.nameLabel == nil {
		c.seriesOf(&c.plain, primLock) // the locks' series exist from the start
	}
	return c, nil
}

func increasing(b []float64) bool {
	for i := 1; i < len(b); i++ {
		if !(b[i-1] < b[i]) {
			return false
		}
	}
	return len(b) > 0
}

// Describe sends the descriptions of the metrics. It implements
// prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
}

// Collect sends the current figures. It implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
}

func (c *Collector) collectors() [8]prometheus.Collector {
	return [8]prometheus.Collector{c.wait, c.hold, c.acquired, c.gaveUp, c.losses, c.renewErrs, c.held, c.waiting}
}

// Observe counts ev under its primitive. It implements baton.Observer; ctx
// is not used.
func (c *Collector) Observe(_ context.Context, ev baton.Event) {
	switch ev.Kind {
	case baton.Waiting:
		c.series(ev.Primitive, ev.Name).waiting.Inc()
	case baton.Acquired:
		s := c.series(ev.Primitive, ev.Name)
		c.howCounter(s, ev.How).Inc()
		s.held.Inc()
		if ev.Queued {
			s.waiting.Dec()
			s.wait[acquired].Observe(ev.Wait.Seconds())
		}
	case baton.GaveUp:
		s := c.series(ev.Primitive, ev.Name)
		oc := outcomeOf(ev.Err)
		s.reason[oc].Inc()
		if ev.Queued {
			s.waiting.Dec()
			s.wait[oc].Observe(ev.Wait.Seconds())
		}
	case baton.Released:
		s := c.series(ev.Primitive, ev.Name)
		end := released
		if errors.Is(ev.Err, baton.ErrClosed) {
			end = closedBy
		}
		s.held.Dec()
		s.hold[end].Observe(ev.Held.Seconds())
	case baton.Lost:
		s := c.series(ev.Primitive, ev.Name)
		s.losses.Inc()
		s.held.Dec()
		s.hold[lost].Observe(ev.Held.Seconds())
	case baton.RenewalFailed:
		c.renewErrs.Inc()
	}
}

// series returns the series of primitive p and a name.
func (c *Collector) series(p baton.Primitive, name string) *series {
	g := &c.plain
	if c.nameLabel != nil {
		g = c.labels.get(c.nameLabel(name))
	}
	return c.seriesOf(g, primIndex(p))
}

// howCounter returns the acquisitions counter of h; a How that baton does
// not define (it never sends one) counts as "unknown", and one the
// primitive cannot have (see hows; baton never sends one) under its name,
// its series made then.
func (c *Collector) howCounter(s *series, h baton.How) prometheus.Counter {
	if h >= baton.Free && h <= baton.Cached && s.how[h] != nil {
		return s.how[h]
	}
	how := "unknown"
	if h >= baton.Free && h <= baton.Cached {
		how = h.String()
	}
	return c.acquired.WithLabelValues(append([]string{s.prim, how}, s.name...)...)
}
