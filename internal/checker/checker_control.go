package checker

// Control: how a fault function steers a Run (pausing holders, marking
// data loss), and the pause points a holder passes.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batonlock/baton"
)

// Point is a place in a hold where Control.Pause can stop a holder.
type Point int

const (
	// BeforeCheck: the hold is over, the holder has not yet looked at its
	// loss signal. Resumed, it behaves correctly: it writes only if Err is
	// still nil.
	BeforeCheck Point = iota
	// AfterCheck: the holder saw Err() == nil and is about to write, as a
	// process that pauses (GC, swap) between its check and its write. Resumed,
	// it writes whatever happened meanwhile: only the fence can stop it.
	AfterCheck
	// AfterWrite: the fenced write is done; the holder has not unlocked yet.
	AfterWrite
)

// Holder describes one acquisition.
type Holder struct {
	Client, Goroutine int
	Name              string
	Limit             int  // the semaphore's limit; 0 for a lock or an election
	Election          bool // the name is an election's
	Token             uint64
	Acquired          time.Time // when Lock or TryLock returned it
	Lock              *baton.Lock
}

// Outcome is what a resumed holder did after its pause.
type Outcome struct {
	Wrote     bool      // the fenced write was attempted
	Applied   bool      // and the fence accepted it
	WriteErr  error     // the write's error, if any
	UnlockErr error     // what Unlock returned
	LostAt    time.Time // when it was told of a loss; zero if never
}

// Paused is a holder stopped at a Point by Control.Pause.
type Paused struct {
	Holder
	a       *acq
	resume  chan struct{}
	once    sync.Once
	outcome chan Outcome // buffered: one value once the holder unlocked
}

// Resume lets the holder go on. Calling it twice is harmless.
func (p *Paused) Resume() { p.once.Do(func() { close(p.resume) }) }

// Outcome waits (bounded by ctx) until the resumed holder has unlocked.
func (p *Paused) Outcome(ctx context.Context) (Outcome, error) {
	select {
	case o := <-p.outcome:
		p.outcome <- o
		return o, nil
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

// LostAt reports when the holder was told of its loss so far.
func (p *Paused) LostAt() (time.Time, bool) {
	p.a.mu.Lock()
	defer p.a.mu.Unlock()
	return p.a.lost, !p.a.lost.IsZero()
}

// Control lets a fault function steer a run. Get it with ControlFrom on the
// fault's context.
type Control struct {
	r *run
}

type ctlKey struct{}

// ControlFrom returns the Control of the run whose fault function got ctx.
func ControlFrom(ctx context.Context) *Control {
	c, _ := ctx.Value(ctlKey{}).(*Control)
	return c
}

type pauseReq struct {
	point Point
	match func(Holder) bool
	got   chan *Paused // buffered 1
}

// Pause stops the next holder that reaches point and matches (nil matches
// any), and returns it once it is stopped. The holder stays stopped until
// Resume (or the end of the run's hard deadline); a stopped holder does not
// react to anything, as a paused process would not.
func (c *Control) Pause(ctx context.Context, point Point, match func(Holder) bool) (*Paused, error) {
	req := &pauseReq{point: point, match: match, got: make(chan *Paused, 1)}
	r := c.r
	r.mu.Lock()
	r.pauses = append(r.pauses, req)
	r.mu.Unlock()
	select {
	case p, ok := <-req.got:
		if !ok {
			return nil, errors.New("checker: pause: the run ended first")
		}
		return p, nil
	case <-ctx.Done():
		r.mu.Lock()
		r.pauses = slices.DeleteFunc(r.pauses, func(x *pauseReq) bool { return x == req })
		r.mu.Unlock()
		select { // matched just now: let it go
		case p, ok := <-req.got:
			if ok {
				p.Resume()
			}
		default:
		}
		return nil, fmt.Errorf("checker: pause: %w", ctx.Err())
	}
}

// DataLoss marks the start of a window in which Redis may lose its data
// (call it just before a restart without persistence); call the returned
// function when the window ends (Redis is back). Overlaps between a holder
// that acquired before the window ended and one that acquired after it began
// are excused when Config.DataLoss is set.
func (c *Control) DataLoss() (end func()) {
	r := c.r
	r.mu.Lock()
	i := len(r.losses)
	r.losses = append(r.losses, window{from: time.Now()})
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.losses[i].to = time.Now()
		r.mu.Unlock()
	}
}

// Clients returns the run's baton Clients, index i as in Config.Options.
func (c *Control) Clients() []*baton.Client { return c.r.clients }

type window struct{ from, to time.Time }

// pausePoint stops the holder if a Pause request for point matches it.
func (r *run) pausePoint(point Point, h Holder, a *acq) *Paused {
	r.mu.Lock()
	var req *pauseReq
	for i, x := range r.pauses {
		if x.point == point && (x.match == nil || x.match(h)) {
			req = x
			r.pauses = slices.Delete(r.pauses, i, i+1)
			break
		}
	}
	r.mu.Unlock()
	if req == nil {
		return nil
	}
	p := &Paused{Holder: h, a: a, resume: make(chan struct{}), outcome: make(chan Outcome, 1)}
	req.got <- p
	// A paused process notices nothing; only Resume (or the end of the run)
	// moves it on.
	select {
	case <-p.resume:
	case <-r.closing:
	}
	return p
}
