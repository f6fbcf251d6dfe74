package admin

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/batonlock/baton/internal/script"
)

// ForceReleasePermit takes from member ("<client id>-<n>.<slot>", as
// Inspect lists the holders) the permit of semaphore name that it holds,
// exactly as the holder's own release would, by the same script: free
// permits go to the first live queued sessions with new fences (and their
// clients are told), or the permit is free. The holder is not told: it
// finds out at its next renewal (within a third of its lease); until then
// it believes it holds the permit, and only a resource that checks fencing
// tokens refuses its writes.
//
// A member that does not hold a permit of name is refused with
// ErrNotHolder, also when it released or took its permit again between
// this call's read of the holders and its release (the release compares
// the fence). A member not of a permit slot's form is refused with
// ErrInvalidMember, and a key that is not a hash with ErrForeignValue;
// nothing changes then. Like ForceRelease, it is not retried after a
// network error, when it may or may not have run: Inspect tells which.
func (a *Admin) ForceReleasePermit(ctx context.Context, name, member string) (Released, error) {
	return a.forceHolder(ctx, KindSemaphore, name, member)
}

// ForceReleaseLeader takes the leadership of election name from its
// leader, or with member set ("<client id>-<n>.e<slot>") from that member
// only, leading or granted the leadership and not yet leading; as the
// holder's own resignation would: the next live campaigner is granted it
// (and its client told), and the election's observers (Observe) are told
// of the change; or nobody leads. The evicted leader finds out at its
// next renewal, as for ForceReleasePermit.
//
// With member "" and nobody leading, nothing changes (ActionNone, no
// error). Otherwise errors are as ForceReleasePermit's.
func (a *Admin) ForceReleaseLeader(ctx context.Context, name, member string) (Released, error) {
	return a.forceHolder(ctx, KindElection, name, member)
}

// forceHolder reads the holder's fence and runs the semaphore release
// script with its owner token, in mode "0" (release; see semrelease.lua).
func (a *Admin) forceHolder(ctx context.Context, kind Kind, name, member string) (Released, error) {
	if err := checkName(name); err != nil {
		return Released{}, err
	}
	if err := checkMember(kind, member); err != nil {
		return Released{}, err
	}
	ns, _, err := a.read(ctx, []item{{kind, name}}, 0)
	if err != nil {
		return Released{}, err
	}
	r := Released{Was: ns[0], Action: ActionNone, Fence: ns[0].Fence}
	k := a.keysOf(kind, name)
	if r.Was.Foreign {
		return r, fmt.Errorf("%w: %q holds %q where the %s's hash belongs; left unchanged", ErrForeignValue, k.main, truncate(r.Was.Value), kind)
	}
	h, ok := pickHolder(r.Was, member)
	switch {
	case !ok && member == "":
		return r, nil // an election that nobody leads
	case !ok:
		return r, notHolder(r.Was, member)
	}
	args := []string{h.Owner, h.Member, "0", "0", a.via(kind, name), name, "0",
		strconv.Itoa(max(r.Was.Limit, 1)), a.announce(kind, name)}
	res, _ := script.Run(ctx, a.rc, script.Pipe{}, script.SemRelease, k.list(), args)
	arr, err := res.ToArray()
	if err == nil && len(arr) == 0 {
		err = fmt.Errorf("empty reply")
	}
	if err != nil {
		return Released{}, fmt.Errorf("admin: force release %s %q: %w", kind, truncate(name), err)
	}
	switch code, _ := arr[0].AsInt64(); code {
	case -1:
		return r, fmt.Errorf("%w: %s no longer holds %s %q under fence %d: it released or took it again since read; nothing changed",
			ErrNotHolder, h.Member, kind, truncate(name), h.Fence)
	case 0:
		r.Action = ActionFreed
	case 1:
		r.Action = ActionGranted
		a.findGrantee(ctx, &r)
	default:
		return Released{}, fmt.Errorf("admin: force release %s %q: unexpected reply %v", kind, truncate(name), arr)
	}
	r.Evicted = h
	return r, nil
}

// pickHolder finds member among n's holders, or for member "" an
// election's leader.
func pickHolder(n Name, member string) (Holder, bool) {
	for _, h := range n.Holders {
		if h.Member == member || member == "" && h.Owner == n.Owner && !h.Pending {
			return h, true
		}
	}
	return Holder{}, false
}

// notHolder is the error for a member that does not hold n; it lists who
// does, so that the operator can pick.
func notHolder(n Name, member string) error {
	var who []string
	for _, h := range n.Holders {
		who = append(who, h.Member)
	}
	holders := "nobody holds it"
	if len(who) > 0 {
		holders = "its holders: " + strings.Join(who, ", ")
	}
	return fmt.Errorf("%w: %s does not hold %s %q (%s); nothing changed", ErrNotHolder, member, n.Kind, truncate(n.Name), holders)
}

// findGrantee reads who holds r.Was after the release that granted it:
// the holder with the lowest fence above the last one issued before. A
// failed read leaves Grantee "" (the release has happened).
func (a *Admin) findGrantee(ctx context.Context, r *Released) {
	ns, _, err := a.read(ctx, []item{{r.Was.Kind, r.Was.Name}}, 0)
	if err != nil {
		return
	}
	for _, h := range ns[0].Holders { // by fence
		if h.Fence > r.Was.Fence {
			r.Grantee, r.Fence = h.Member, h.Fence
			return
		}
	}
}

// checkMember refuses a member that is not of the form kind's slots take:
// "<client id>-<n>.<slot>" for a semaphore's permit (required),
// "<client id>-<n>.e<slot>" for an election's campaign ("" for its
// leader), "<client id>-<n>.r<slot>" or ".w<slot>" for a read-write lock's
// reader or writer ("" for every holder).
func checkMember(kind Kind, member string) error {
	want := "a semaphore's permit slot (<client id>-<n>.<slot>)"
	switch {
	case kind != KindSemaphore && member == "":
		return nil
	case kind == KindElection:
		want = "an election's campaign slot (<client id>-<n>.e<slot>)"
	case kind == KindRWMutex:
		want = "a read-write lock's reader or writer slot (<client id>-<n>.r<slot>, <client id>-<n>.w<slot>)"
	}
	session, slot, ok := strings.Cut(member, ".")
	switch kind {
	case KindElection:
		slot, ok = strings.CutPrefix(slot, "e")
	case KindRWMutex:
		ok = ok && modeOf(member) != ""
		slot = slot[min(1, len(slot)):]
	}
	if _, isSlot := digits(slot); member == "" || !ok || !isSlot || clientOf(session) == "" || !isMember(session) {
		return fmt.Errorf("%w: %q is not %s", ErrInvalidMember, truncate(member), want)
	}
	return nil
}
