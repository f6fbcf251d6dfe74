package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/script"
)

// Actions of the force releases, in Released.Action.
const (
	ActionGranted = "granted" // the lock, permit or leadership went to the first live queued session
	ActionFreed   = "freed"   // nobody was queued: the lock key became a released marker, the permit or leadership is free
	ActionNone    = "none"    // nothing was held (or the value is foreign): nothing changed
	// ActionRecalled: the lock's session keeps it cached (Name.Cached) and
	// may serve it from its cache until it hears of the change: its key is
	// deleted, its cache mark kept so that nobody else takes it, and the
	// session is recalled. It lets go at once if the lock is unused (the
	// first live queued session gets it), at its next renewal (within a
	// third of its lease) if in use, at its lease end if its process is
	// stuck.
	ActionRecalled = "recalled"
)

// Released says what a force release did. It is a plain value, safe to
// copy.
type Released struct {
	Was     Name   // the name as it was (without Queue; Cached read only as ActionRecalled tells)
	Evicted Holder // the holder it was taken from (ActionRecalled: recalled); zero for ActionNone
	Action  string // ActionGranted: to the head of the queue; ActionFreed: nobody was queued; ActionRecalled: cached, recalled; ActionNone: nothing was held
	// Grantee is, for ActionGranted, the session (or permit or campaign
	// slot) that got it. A permit's or leadership's grantee is read just
	// after the release: "" if it released already.
	Grantee string
	// Fence is, for ActionGranted, the grantee's fence; for ActionFreed,
	// ActionRecalled and ActionNone, the last one issued (a lock's
	// marker's, or its holder's; 0: no key).
	Fence uint64
}

// Token returns Fence as a Lock's Token reports it: the grantee's token
// when ActionGranted.
func (r Released) Token() uint64 { return r.Fence << tokenShift }

// ForceRelease takes the lock name from its holder, as the holder's own
// release would: the first live queued session gets it with a new fence
// (and its client is told), or the key becomes a released marker. The
// holder's own session, if queued, is not skipped. The holder is not told:
// it finds out at once with held-key tracking (baton's default on a
// standalone or sentinel deployment), else at its next renewal (within a
// third of its lease). Until then it believes it holds the lock, and only
// a resource that checks fencing tokens refuses its writes.
//
// A lock its session keeps cached (Name.Cached) is not handed on at once
// (ActionRecalled): without held-key tracking that session would go on
// serving it from its cache to its callers while the next holder has it.
// Its key goes and its session is recalled; nobody else can take the name
// until that session lets go: at once when the lock is unused, at its next
// renewal when in use (which ends its Lock as lost), at its lease end when
// its process is stuck. The first live queued session gets it then.
//
// A free name (no key, or a released marker) is left as it is, with
// ActionNone. A key holding a value baton did not write is left as it is too,
// and the error wraps ErrForeignValue.
//
// ForceRelease is one script: it acts on the holder it finds when it runs,
// whoever that is, so calling it twice may evict two holders. It is not
// retried after a network error, when it may or may not have run; Inspect
// tells which.
func (a *Admin) ForceRelease(ctx context.Context, name string) (Released, error) {
	if err := checkName(name); err != nil {
		return Released{}, err
	}
	k := a.keysOf(KindLock, name)
	res, _ := script.Run(ctx, a.rc, script.Pipe{}, script.Force, k.list(), []string{a.via(KindLock, name), name, "C:" + a.prefix})
	arr, err := res.ToArray()
	if err != nil {
		return Released{}, fmt.Errorf("admin: force release %q: %w", truncate(name), err)
	}
	if len(arr) != 6 {
		return Released{}, fmt.Errorf("admin: force release %q: unexpected reply of %d elements", truncate(name), len(arr))
	}
	var s [6]string
	for i, m := range arr {
		s[i], _ = m.ToString()
	}
	var r Released
	r.Action, r.Grantee = s[0], s[4]
	r.Was.Kind, r.Was.Name = KindLock, name
	r.Was.setValue(s[1], s[1] != "")
	if pttl, _ := arr[2].AsInt64(); r.Was.Held && pttl > 0 {
		r.Was.LeaseLeft = time.Duration(pttl) * time.Millisecond
	}
	r.Was.setLockHolder()
	qlen, _ := arr[3].AsInt64()
	r.Was.QueueLen = int(qlen)
	r.Fence, _ = digits(s[5])
	switch r.Action {
	case "foreign":
		r.Was.Held, r.Was.Marker, r.Was.Foreign, r.Was.Value, r.Was.Holders = false, false, true, s[1], nil
		return Released{Was: r.Was, Action: ActionNone}, fmt.Errorf("%w: %q holds %q; left unchanged", ErrForeignValue, k.main, truncate(s[1]))
	case ActionGranted, ActionFreed, ActionRecalled:
		r.Was.Cached = r.Action == ActionRecalled
		a.setEvicted(ctx, &r, r.Was.Holders[0])
		return r, nil
	case ActionNone:
		return r, nil
	}
	return Released{}, fmt.Errorf("admin: force release %q: unexpected action %q", truncate(name), r.Action)
}

// setEvicted records h as the holder r took it from, with its instance:
// read after the release, which has happened whether or not this read
// works (the instance then stays "").
func (a *Admin) setEvicted(ctx context.Context, r *Released, h Holder) {
	ns := []Name{{Holders: []Holder{h}}}
	if a.fillInstances(ctx, ns) == nil {
		h = ns[0].Holders[0]
	}
	r.Evicted = h
	for i := range r.Was.Holders {
		if r.Was.Holders[i].Member == h.Member {
			r.Was.Holders[i].Instance = h.Instance
		}
	}
	if r.Was.Owner == h.Owner {
		r.Was.Instance = h.Instance
	}
}
