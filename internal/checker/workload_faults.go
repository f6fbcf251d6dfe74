package checker

// Fault windows of a workload run: how a fault function marks them, and
// how the checks ask whether a time meets one.

import (
	"context"
	"time"
)

// WorkloadControl lets a fault function of RunWorkload mark when it
// disturbs Redis or the network.
type WorkloadControl struct{ r *wrun }

type wctlKey struct{}

// WorkloadControlFrom returns the control of the workload run whose fault
// function got ctx.
func WorkloadControlFrom(ctx context.Context) *WorkloadControl {
	c, _ := ctx.Value(wctlKey{}).(*WorkloadControl)
	return c
}

// Fault marks the start of a fault window (call it just before disturbing
// Redis or the network); call the returned function when the disturbance
// is over. Outside fault windows (and their grace) no loss, idle wait,
// FIFO breach or Redis error is excused.
func (c *WorkloadControl) Fault() (end func()) {
	r := c.r
	r.mu.Lock()
	i := len(r.faults)
	r.faults = append(r.faults, window{from: time.Now()})
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.faults[i].to = time.Now()
		r.mu.Unlock()
	}
}

func (r *wrun) inFault(from, to time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.faultAtLocked(from, to, r.cfg.FaultGrace)
}

// cleanupExcusedLocked reports whether what ws left in Redis after its
// Close is excused: a fault within its lease before the Close, or during
// it, may have lost the calls that would have removed it, and it lapses
// within the lease. r.mu is held.
func (r *wrun) cleanupExcusedLocked(ws *wsession) bool {
	if !ws.killed.IsZero() {
		return true // a child's: what it left lapses with its lease
	}
	return r.faultAtLocked(ws.closeStart.Add(-ws.lease), ws.closeEnd, r.cfg.FaultGrace)
}

// faultAtLocked: does [from, to] meet a fault window extended by grace?
func (r *wrun) faultAtLocked(from, to time.Time, grace time.Duration) bool {
	for _, w := range r.faults {
		wto := w.to
		if wto.IsZero() {
			wto = never
		} else {
			wto = wto.Add(grace)
		}
		if !from.After(wto) && !to.Before(w.from) {
			return true
		}
	}
	return false
}
