package checker

// The analysis of a Run's records once every worker stopped: overlaps,
// token order, hangs and the fenced counters.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// analyse fills rep from the records; every worker has stopped.
func (r *run) analyse(ctx context.Context, rep *Report) {
	r.judgeElections(rep)
	rep.LockErrors, rep.TryLockErrors, rep.UnlockErrors = r.lock, r.trylock, r.unlock
	rep.Unexpected, rep.NUnexpected = r.errs, r.nerrs
	rep.TryLockBusy = r.trylock["not-acquired"]
	rep.Timeouts = r.lock["context"]
	rep.Attempts = len(r.calls)
	rep.Acquisitions = len(r.acqs)
	rep.MinLossLead = -1
	faultEnd := r.faultEnd
	for _, c := range r.calls {
		if c.kind == "" && !c.try {
			rep.MaxWait = max(rep.MaxWait, c.end.Sub(c.start))
		}
	}
	byName := map[string][]*acq{}
	for _, a := range r.acqs {
		byName[a.name] = append(byName[a.name], a)
		if a.acquired.After(faultEnd) {
			rep.AfterFault++
		}
		switch a.write {
		case writeApplied:
			rep.WritesApplied++
		case writeRejected:
			rep.WritesRejected++
		case writeUnknown:
			rep.WritesUnknown++
		}
		if !a.lost.IsZero() {
			rep.LossesSignalled++
		}
		if a.unlockKind == "lost" && a.lost.IsZero() {
			rep.UnsignalledLosses++
			if len(rep.failures) < 20 && !r.cfg.DataLoss {
				rep.failures = append(rep.failures, fmt.Sprintf("%s token %d (client %d): Unlock reported ErrLockLost at t=%v but Done never said so",
					a.name, a.token, a.client, a.unlockAt.Sub(r.faultStart).Round(time.Millisecond)))
			}
		}
	}
	for name, as := range byName {
		slices.SortStableFunc(as, func(x, y *acq) int { return x.acquired.Compare(y.acquired) })
		if limit := r.limits[name]; limit > 0 {
			r.semaphore(rep, name, limit, as)
			continue
		}
		r.overlaps(rep, name, as)
		// Tokens rise in acquisition order.
		var top *acq
		for _, a := range as {
			if top != nil && a.token <= top.token {
				rep.TokenInversions++
				if len(rep.failures) < 20 {
					rep.failures = append(rep.failures, fmt.Sprintf("%s: token %d (client %d, t=%v) after token %d (client %d, t=%v)",
						name, a.token, a.client, r.rel(a.acquired), top.token, top.client, r.rel(top.acquired)))
				}
			}
			if top == nil || a.token > top.token {
				top = a
			}
		}
	}
	r.hangs(rep, byName, faultEnd)
	r.counters(ctx, rep, byName)
}

func (r *run) rel(t time.Time) time.Duration { return t.Sub(r.faultStart).Round(time.Millisecond) }

// end is when a holder stopped holding: Unlock called, or told of the loss.
func (a *acq) end() time.Time {
	e := a.unlockAt
	if !a.lost.IsZero() && a.lost.Before(e) {
		e = a.lost
	}
	return e
}

func (r *run) overlaps(rep *Report, name string, as []*acq) {
	for j, b := range as {
		for i := j - 1; i >= 0; i-- {
			a := as[i]
			if a.lost.IsZero() || a.lost.After(b.acquired) {
				if a.end().After(b.acquired) { // a still held, not told: two holders
					ok, late := r.excused(rep, a, b)
					if ok {
						rep.ExcusedOverlaps++
						continue
					}
					rep.Overlaps++
					if late != nil {
						r.noteLate(rep, []*lateAcq{late})
					}
					if len(rep.failures) < 20 {
						rep.failures = append(rep.failures, fmt.Sprintf(
							"%s: client %d acquired token %d at t=%v while client %d held token %d (acquired t=%v, unlock t=%v, told of loss: %v)",
							name, b.client, b.token, r.rel(b.acquired), a.client, a.token, r.rel(a.acquired), r.rel(a.unlockAt), lostText(r, a)))
					}
				}
				continue
			}
			// a was told of its loss before b acquired.
			if a.unlockAt.After(b.acquired) && a.client != b.client {
				rep.LossHandovers++
				if lead := b.acquired.Sub(a.lost); rep.MinLossLead < 0 || lead < rep.MinLossLead {
					rep.MinLossLead = lead
				}
			}
		}
	}
}

func lostText(r *run, a *acq) string {
	if a.lost.IsZero() {
		return "never"
	}
	return fmt.Sprintf("t=%v", r.rel(a.lost))
}

// iv is an interval in which a name is busy.
type iv struct{ from, to time.Time }

// hangs finds Lock calls that waited on a free name after the fault ended.
// A name is busy from an acquisition until its Unlock returned; after a
// loss or a failed Unlock the key may stay in Redis, so for a lease more.
func (r *run) hangs(rep *Report, byName map[string][]*acq, faultEnd time.Time) {
	busy := map[string][]iv{}
	for name, as := range byName {
		for _, a := range as {
			to := a.unlockRet
			if a.unlockKind != "" || !a.lost.IsZero() || a.write == writeUnknown {
				to = to.Add(r.lease)
			}
			busy[name] = append(busy[name], iv{a.acquired, to})
		}
	}
	for _, c := range r.calls {
		if c.try || c.end.IsZero() || c.kind == "closed" {
			continue
		}
		from := c.start
		if from.Before(faultEnd) {
			from = faultEnd
		}
		if !c.end.After(from) {
			continue
		}
		if limit := r.limits[c.name]; limit > 0 {
			r.semHang(rep, c, semFree(busy[c.name], limit, from, c.end))
			continue
		}
		// Longest stretch of [from, c.end] not covered by busy intervals.
		ivs := busy[c.name]
		slices.SortFunc(ivs, func(x, y iv) int { return cmp.Compare(x.from.UnixNano(), y.from.UnixNano()) })
		cur, longest := from, time.Duration(0)
		for _, v := range ivs {
			if !v.to.After(cur) {
				continue
			}
			if v.from.After(c.end) {
				break
			}
			if v.from.After(cur) {
				longest = max(longest, v.from.Sub(cur))
			}
			cur = v.to
		}
		if c.end.After(cur) {
			longest = max(longest, c.end.Sub(cur))
		}
		rep.MaxIdleWait = max(rep.MaxIdleWait, longest)
		if longest > r.cfg.HangBound {
			rep.Hangs++
			if len(rep.failures) < 20 {
				rep.failures = append(rep.failures, fmt.Sprintf("client %d waited %v on free %s (call t=%v..%v, %s)",
					c.client, longest.Round(time.Millisecond), c.name, r.rel(c.start), r.rel(c.end), cmp.Or(c.errText, "acquired")))
			}
		}
	}
}

// counters compares the counters with the fenced increments.
func (r *run) counters(ctx context.Context, rep *Report, byName map[string][]*acq) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, name := range r.names {
		_, ctrKey, appliedKey := r.keys(name)
		ctr, err := r.rc.Do(ctx, r.rc.B().Get().Key(ctrKey).Build()).AsInt64()
		if err != nil && !rueidis.IsRedisNil(err) {
			rep.failures = append(rep.failures, fmt.Sprintf("reading counter %s: %v", ctrKey, err))
			continue
		}
		m, err := r.rc.Do(ctx, r.rc.B().Hgetall().Key(appliedKey).Build()).AsStrMap()
		if err != nil {
			rep.failures = append(rep.failures, fmt.Sprintf("reading %s: %v", appliedKey, err))
			continue
		}
		rep.Counter += ctr
		rep.AppliedInRedis += len(m)
		if r.cfg.DataLoss {
			continue
		}
		for _, a := range byName[name] {
			if a.write == writeApplied {
				if _, ok := m[strconv.FormatUint(a.token, 10)]; !ok {
					rep.failures = append(rep.failures, fmt.Sprintf("%s: write of token %d was acknowledged but Redis has no record of it", name, a.token))
				}
			}
		}
		if ctr != int64(len(m)) {
			rep.failures = append(rep.failures, fmt.Sprintf("%s: counter %d after %d fenced increments: an update was lost", name, ctr, len(m)))
		}
		// In token order the increments wrote 1, 2, 3, ...
		toks := make([]uint64, 0, len(m))
		for k := range m {
			t, _ := strconv.ParseUint(k, 10, 64)
			toks = append(toks, t)
		}
		slices.Sort(toks)
		for i, t := range toks {
			if v := m[strconv.FormatUint(t, 10)]; v != strconv.Itoa(i+1) {
				rep.failures = append(rep.failures, fmt.Sprintf("%s: increment by token %d wrote %s, want %d: it read a stale counter", name, t, v, i+1))
				break
			}
		}
	}
}
