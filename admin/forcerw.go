package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonlock/baton/internal/script"
	"github.com/redis/rueidis"
)

// ForceReleaseRWMutex takes the read-write lock name from its holders,
// each exactly as the holder's own release would, by the same script: with
// member "" from every holder (its readers, or its writer), so that the
// lock is free of whoever held it when read; with member set, from that
// reader ("<client id>-<n>.r<slot>") or writer ("<client id>-<n>.w<slot>")
// only. Once nobody holds, the next phase of the queue is granted with new
// fences (its writer, or the readers queued together at its head) and
// their clients are told (ActionGranted, Granted); or nobody was queued
// (ActionFreed; with member set, other readers may still hold). The
// evicted holders are not told: each finds out at its next renewal
// (within a third of its lease); until then it believes it holds, and only
// a resource that checks fencing tokens refuses its writes.
//
// Each holder is released under the fence read before, in one pipeline:
// a holder that released or took the lock again since is left alone, and
// a session granted the lock by one of these releases is not evicted by
// the next. With member "", such holders are skipped, and when nobody
// holds nothing changes (ActionNone, no error); a named member that does
// not hold is refused with ErrNotHolder. A member not of a reader's or
// writer's slot form is refused with ErrInvalidMember, and a key that is
// not a hash with ErrForeignValue; nothing changes then. Like
// ForceRelease, it is not retried after a network error, when it may or
// may not have run (Released then says what the releases that answered
// did): Inspect tells which.
func (a *Admin) ForceReleaseRWMutex(ctx context.Context, name, member string) (Released, error) {
	if err := checkName(name); err != nil {
		return Released{}, err
	}
	if err := checkMember(KindRWMutex, member); err != nil {
		return Released{}, err
	}
	ns, _, err := a.read(ctx, []item{{KindRWMutex, name}}, 0)
	if err != nil {
		return Released{}, err
	}
	r := Released{Was: ns[0], Action: ActionNone, Fence: ns[0].Fence}
	k := a.keysOf(KindRWMutex, name)
	if r.Was.Foreign {
		return r, fmt.Errorf("%w: %q holds %q where the %s's hash belongs; left unchanged", ErrForeignValue, k.main, truncate(r.Was.Value), KindRWMutex)
	}
	evict := r.Was.Holders
	if member != "" {
		h, ok := pickHolder(r.Was, member)
		if !ok {
			return r, notHolder(r.Was, member)
		}
		evict = []Holder{h}
	}
	if len(evict) == 0 {
		return r, nil
	}
	calls := make([]script.Call, len(evict))
	for i, h := range evict {
		// See rwrelease.lua: mode "0" releases, granting the next phase.
		calls[i] = script.Call{Script: script.RWRelease, Keys: k.list(),
			Args: []string{h.Owner, h.Member, "0", "0", a.via(KindRWMutex, name), name, "0"}}
	}
	res, _ := script.RunMulti(ctx, a.rc, script.Pipe{}, calls...)
	granted, errs := rwReplies(&r, evict, res, member != "")
	switch {
	case granted:
		r.Action = ActionGranted
		a.findGranted(ctx, &r)
	case len(r.EvictedAll) > 0:
		r.Action = ActionFreed
	}
	if len(r.EvictedAll) > 0 {
		r.Evicted = r.EvictedAll[0]
	}
	return r, errors.Join(errs...)
}

// rwReplies reads the replies of the releases of evict into r (EvictedAll)
// and says whether one granted the lock; named says whether the operator
// named the holder, whose release refused is then an error.
func rwReplies(r *Released, evict []Holder, res []rueidis.RedisResult, named bool) (granted bool, errs []error) {
	name := r.Was.Name
	for i, h := range evict {
		arr, err := res[i].ToArray()
		if err == nil && len(arr) == 0 {
			err = fmt.Errorf("empty reply")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("admin: force release %s %q from %s: %w", KindRWMutex, truncate(name), h.Member, err))
			continue
		}
		switch code, _ := arr[0].AsInt64(); code {
		case -1:
			if named {
				errs = append(errs, fmt.Errorf("%w: %s no longer holds %s %q under fence %d: it released or took it again since read; nothing changed",
					ErrNotHolder, h.Member, KindRWMutex, truncate(name), h.Fence))
			}
			continue // with no member named: gone by itself
		case 0:
		case 1:
			granted = true
		default:
			errs = append(errs, fmt.Errorf("admin: force release %s %q from %s: unexpected reply %v", KindRWMutex, truncate(name), h.Member, arr))
			continue
		}
		r.EvictedAll = append(r.EvictedAll, h)
	}
	return granted, errs
}

// findGranted reads who holds r.Was after the releases that granted it:
// the holders with fences above the last one issued before, the first of
// them as Grantee and Fence. A failed read leaves them unset (the release
// has happened).
func (a *Admin) findGranted(ctx context.Context, r *Released) {
	ns, _, err := a.read(ctx, []item{{r.Was.Kind, r.Was.Name}}, 0)
	if err != nil {
		return
	}
	for _, h := range ns[0].Holders { // by fence
		if h.Fence > r.Was.Fence {
			r.Granted = append(r.Granted, h)
		}
	}
	if len(r.Granted) > 0 {
		r.Grantee, r.Fence = r.Granted[0].Member, r.Granted[0].Fence
	}
}
