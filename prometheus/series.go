package batonprom

import (
	"context"
	"errors"
	"strings"
	"sync"

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

// series holds the children of every metric for one value of the name
// label (or none), looked up once so that counting hashes no labels.
type series struct {
	name    []string // the name label's value, or empty
	held    prometheus.Gauge
	waiting prometheus.Gauge
	losses  prometheus.Counter
	how     [baton.Granted + 1]prometheus.Counter // index 0 unused
	reason  [nOutcomes]prometheus.Counter         // acquired unused
	wait    [nOutcomes]prometheus.Observer
	hold    [nEndings]prometheus.Observer
}

// newSeries makes the series of a name label value; none for no name.
func (c *Collector) newSeries(name ...string) *series {
	with := func(v string) []string { return append([]string{v}, name...) }
	s := &series{
		name:    name,
		held:    c.held.WithLabelValues(name...),
		waiting: c.waiting.WithLabelValues(name...),
		losses:  c.losses.WithLabelValues(name...),
	}
	for h := baton.Free; h <= baton.Granted; h++ {
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

// seriesCache maps the values of Options.NameLabel to their series.
type seriesCache struct {
	mu sync.RWMutex // protects m
	m  map[string]*series
}

// get returns the series of label, made by mk on first use. Label values
// must be UTF-8: others are repaired.
func (sc *seriesCache) get(label string, mk func(name ...string) *series) *series {
	sc.mu.RLock()
	s := sc.m[label]
	sc.mu.RUnlock()
	if s != nil {
		return s
	}
	return sc.add(label, mk)
}

func (sc *seriesCache) add(label string, mk func(name ...string) *series) *series {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if s := sc.m[label]; s != nil {
		return s
	}
	if sc.m == nil {
		sc.m = make(map[string]*series)
	}
	s := mk(strings.ToValidUTF8(label, "\uFFFD"))
	sc.m[label] = s
	return s
}
