package batonprom

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/batonlock/baton"
	"github.com/prometheus/client_golang/prometheus"
)

// outcome is how a Lock call ended: the value of the label outcome, and
// but for acquired of reason.
type outcome uint8

const (
	acquired outcome = iota
	timeout
	canceled
	closed
	failed
	nOutcomes
)

var outcomeNames = [nOutcomes]string{"acquired", "timeout", "canceled", "closed", "error"}

// outcomeOf classifies the error of a GaveUp event. A timeout may also
// carry the last Redis error, so the context errors are tested first.
func outcomeOf(err error) outcome {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return timeout
	case errors.Is(err, context.Canceled):
		return canceled
	case errors.Is(err, baton.ErrClosed):
		return closed
	}
	return failed
}

// ending is how a held lock ended: the value of the label end.
type ending uint8

const (
	released ending = iota // by Unlock
	closedBy               // by Close; named "closed"
	lost
	nEndings
)

var endingNames = [nEndings]string{"released", "closed", "lost"}

// Primitives: the index of a baton.Primitive among a group's series, and
// the value of the label primitive. The zero Primitive (events about no
// name have it; baton sends none with a name) is "", one baton does not
// define "unknown".
const (
	primLock    = int(baton.PrimitiveLock)
	primUnknown = int(baton.PrimitiveElection) + 1
	nPrims      = primUnknown + 1
)

func primIndex(p baton.Primitive) int { return min(int(p), primUnknown) }

func primName(i int) string { return baton.Primitive(i).String() }

// series holds the children of every metric for one primitive and one
// value of the name label (or none), looked up once so that counting
// hashes no labels.
type series struct {
	prim    string   // the primitive label's value
	name    []string // the name label's value, or empty
	held    prometheus.Gauge
	waiting prometheus.Gauge
	losses  prometheus.Counter
	how     [baton.Cached + 1]prometheus.Counter // index 0 unused; nil for a how the primitive cannot have (see hows)
	reason  [nOutcomes]prometheus.Counter        // acquired unused
	wait    [nOutcomes]prometheus.Observer
	hold    [nEndings]prometheus.Observer
}

// newSeries makes the series of primitive prim and a name label value;
// none for no name.
func (c *Collector) newSeries(prim string, name ...string) *series {
	plain := append([]string{prim}, name...)
	with := func(v string) []string { return append([]string{prim, v}, name...) }
	s := &series{
		prim:    prim,
		name:    name,
		held:    c.held.WithLabelValues(plain...),
		waiting: c.waiting.WithLabelValues(plain...),
		losses:  c.losses.WithLabelValues(plain...),
	}
	for _, h := range hows(prim) {
		s.how[h] = c.acquired.WithLabelValues(with(h.String())...)
	}
	for oc := range nOutcomes {
		if oc != acquired {
			s.reason[oc] = c.gaveUp.WithLabelValues(with(outcomeNames[oc])...)
		}
		s.wait[oc] = c.wait.WithLabelValues(with(outcomeNames[oc])...)
	}
	for e := range nEndings {
		s.hold[e] = c.hold.WithLabelValues(with(endingNames[e])...)
	}
	return s
}

// hows are the ways a primitive named prim can be acquired, whose series
// exist from the primitive's first event: a semaphore's permit and an
// election's leadership are never passed between goroutines of a session
// nor cached (baton's CohortLimit and CacheIdle apply to locks), so they
// are free or granted. A primitive baton does not define may be anything.
func hows(prim string) []baton.How {
	switch prim {
	case baton.PrimitiveSemaphore.String(), baton.PrimitiveElection.String():
		return []baton.How{baton.Free, baton.Granted}
	}
	return []baton.How{baton.Free, baton.Handoff, baton.Granted, baton.Cached}
}

// group holds the series of one value of the name label (or none), one
// per primitive, each made on the first event of its primitive.
type group struct {
	name []string   // the name label's value, or empty
	mu   sync.Mutex // serializes making series; loading needs no lock
	prim [nPrims]atomic.Pointer[series]
}

// seriesOf returns g's series of primitive index i, made on first use.
func (c *Collector) seriesOf(g *group, i int) *series {
	if s := g.prim[i].Load(); s != nil {
		return s
	}
	return c.addSeries(g, i)
}

func (c *Collector) addSeries(g *group, i int) *series {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.prim[i].Load(); s != nil {
		return s
	}
	s := c.newSeries(primName(i), g.name...)
	g.prim[i].Store(s)
	return s
}

// groupCache maps the values of Options.NameLabel to their groups.
type groupCache struct {
	mu sync.RWMutex // protects m
	m  map[string]*group
}

// get returns the group of label, made on first use. Label values must be
// UTF-8: others are repaired.
func (gc *groupCache) get(label string) *group {
	gc.mu.RLock()
	g := gc.m[label]
	gc.mu.RUnlock()
	if g != nil {
		return g
	}
	return gc.add(label)
}

func (gc *groupCache) add(label string) *group {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if g := gc.m[label]; g != nil {
		return g
	}
	if gc.m == nil {
		gc.m = make(map[string]*group)
	}
	g := &group{name: []string{strings.ToValidUTF8(label, "\uFFFD")}}
	gc.m[label] = g
	return g
}
