package batonotel

import (
	"context"
	"errors"
	"sync"

	"github.com/batonlock/baton"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys.
const (
	keyName      = attribute.Key("baton.lock.name")
	keyPrimitive = attribute.Key("baton.lock.primitive")
	keyHow       = attribute.Key("baton.lock.how")
	keyOutcome   = attribute.Key("baton.lock.outcome")
	keyReason    = attribute.Key("baton.lock.reason")
	keyEnd       = attribute.Key("baton.lock.end")
	keyToken     = attribute.Key("baton.lock.token")
)

// outcome is how a Lock call ended: the value of baton.lock.outcome, and
// but for acquired of baton.lock.reason.
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

// ending is how a held lock ended: the value of baton.lock.end.
type ending uint8

const (
	released ending = iota // by Unlock
	closedBy               // by Close; named "closed"
	lost
	nEndings
)

var endingNames = [nEndings]string{"released", "closed", "lost"}

// nHows covers baton.How values 0 (unknown) to 4 (Cached).
const nHows = int(baton.Cached) + 1

func howIndex(h baton.How) int {
	if int(h) < nHows {
		return int(h)
	}
	return 0
}

// Primitives: the index of a baton.Primitive among a label's sets, whose
// String is the value of baton.lock.primitive. The zero Primitive (events
// about no name have it; baton sends none with a name) is "", one baton
// does not define "unknown": the index after the last Primitive baton
// defines.
const (
	primUnknown = int(baton.PrimitiveRWMutex) + 1
	nPrims      = primUnknown + 1
)

func primIndex(p baton.Primitive) int { return min(int(p), primUnknown) }

// attrSets holds, for one primitive and one value of baton.lock.name (or
// none), the measurement options of every attribute combination, built
// once so that recording allocates nothing.
type attrSets struct {
	spanName string               // of the span of a call that waited
	prim     attribute.KeyValue   // baton.lock.primitive
	name     []attribute.KeyValue // baton.lock.name, or empty
	plainAdd []metric.AddOption   // the primitive and name alone, in every set
	how      [nHows][]metric.AddOption
	reason   [nOutcomes][]metric.AddOption // acquired is unused
	outcome  [nOutcomes][]metric.RecordOption
	end      [nEndings][]metric.RecordOption
}

// perPrim are the sets of one name label (or none), by primitive index.
type perPrim [nPrims]*attrSets

// newPerPrim builds the sets of every primitive for a name label; label nil
// means no name.
func newPerPrim(label *string) *perPrim {
	var pp perPrim
	for i := range pp {
		pp[i] = newAttrSets(baton.Primitive(i), label)
	}
	return &pp
}

// newAttrSets builds the sets for a primitive and a name label; label nil
// means no name.
func newAttrSets(p baton.Primitive, label *string) *attrSets {
	a := &attrSets{spanName: spanName(p), prim: keyPrimitive.String(p.String())}
	if label != nil {
		a.name = []attribute.KeyValue{keyName.String(*label)}
	}
	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append(kv, a.prim), a.name...)...))
	}
	a.plainAdd = []metric.AddOption{with()}
	for h := range nHows {
		a.how[h] = []metric.AddOption{with(keyHow.String(baton.How(h).String()))}
	}
	for oc := range nOutcomes {
		a.reason[oc] = []metric.AddOption{with(keyReason.String(outcomeNames[oc]))}
		a.outcome[oc] = []metric.RecordOption{with(keyOutcome.String(outcomeNames[oc]))}
	}
	for e := range nEndings {
		a.end[e] = []metric.RecordOption{with(keyEnd.String(endingNames[e]))}
	}
	return a
}

// labelCache maps the values of Options.NameLabel to their sets.
type labelCache struct {
	mu sync.RWMutex // protects m
	m  map[string]*perPrim
}

func (c *labelCache) get(label string) *perPrim {
	c.mu.RLock()
	a := c.m[label]
	c.mu.RUnlock()
	if a != nil {
		return a
	}
	return c.add(label)
}

func (c *labelCache) add(label string) *perPrim {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.m[label]; a != nil {
		return a
	}
	if c.m == nil {
		c.m = make(map[string]*perPrim)
	}
	a := newPerPrim(&label)
	c.m[label] = a
	return a
}
