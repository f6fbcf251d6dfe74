package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/batonlock/baton/admin"
)

const releaseSynopsis = "release -force [-kind lock|semaphore|election] [-member MEMBER] NAME"

func (cfg *config) parseRelease(args []string) (func(*admin.Admin) int, int) {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	force := fs.Bool("force", false, "evict the holder (required)")
	kindFlag := fs.String("kind", "", "what to release: lock, a semaphore's permit, an election's leadership (default: lock, or what -member names)")
	member := fs.String("member", "", "the holder to evict: a semaphore's permit slot <session>.<slot> (required for a semaphore), "+
		"an election's campaign slot <session>.e<slot> (default: the leader); baton show NAME lists them")
	name, code, ok := cfg.verbFlags(fs, releaseSynopsis, args, true)
	if !ok {
		return nil, code
	}
	kind, err := releaseKind(admin.Kind(*kindFlag), *member)
	if err != nil {
		return nil, cfg.verbError("release", err.Error())
	}
	if !*force {
		fmt.Fprintf(cfg.err, "baton: refusing to release %s without -force: it evicts the holder, "+
			"which goes on working until it notices (at once, or at its next renewal within a third of its lease), "+
			"and its writes are then refused only by a resource that checks fencing tokens. "+
			"Run `baton %s` to do it anyway.\n", quote(name), strings.Join(releaseArgs(*kindFlag, *member, name), " "))
		return nil, exitUsage
	}
	return func(a *admin.Admin) int {
		switch kind {
		case admin.KindSemaphore:
			return cfg.releaseHolder(a, kind, name, *member, a.ForceReleasePermit)
		case admin.KindElection:
			return cfg.releaseHolder(a, kind, name, *member, a.ForceReleaseLeader)
		}
		return cfg.release(a, name)
	}, exitOK
}

// releaseKind is what release acts on: -kind, else the kind -member's form
// names (a campaign slot ends in ".e<slot>", a permit slot in ".<slot>"),
// else a lock.
func releaseKind(kind admin.Kind, member string) (admin.Kind, error) {
	if kind != "" && !slices.Contains(kinds, kind) {
		return "", fmt.Errorf("-kind %q: want lock, semaphore or election", kind)
	}
	if kind == "" && member != "" {
		i := strings.LastIndexByte(member, '.')
		switch {
		case i < 0:
			return "", fmt.Errorf("-member %q names neither a permit slot (<session>.<slot>) nor a campaign slot (<session>.e<slot>)", member)
		case strings.HasPrefix(member[i+1:], "e"):
			kind = admin.KindElection
		default:
			kind = admin.KindSemaphore
		}
	}
	switch {
	case kind == admin.KindLock && member != "":
		return "", fmt.Errorf("-member names a semaphore's or an election's holder; a lock has one holder: drop -member")
	case kind == admin.KindSemaphore && member == "":
		return "", fmt.Errorf("a semaphore has several holders: give the permit's -member (baton show NAME lists them)")
	case kind == "":
		kind = admin.KindLock
	}
	return kind, nil
}

// releaseArgs spells the release command with -force, as given.
func releaseArgs(kind, member, name string) []string {
	args := []string{"release", "-force"}
	if kind != "" {
		args = append(args, "-kind", kind)
	}
	if member != "" {
		args = append(args, "-member", member)
	}
	return append(args, quote(name))
}

// release force-releases the lock name and says whom it took the lock from
// and what it did.
func (cfg *config) release(a *admin.Admin, name string) int {
	ctx, cancel := cfg.ctx()
	r, err := a.ForceRelease(ctx, name)
	cancel()
	if err != nil {
		return cfg.fail(err)
	}
	was := r.Was
	switch r.Action {
	case admin.ActionNone:
		how := "no key"
		if was.Marker {
			how = fmt.Sprintf("released marker, last token %d", was.Token)
		}
		fmt.Fprintf(cfg.err, "baton: %s is not held (%s): nothing released\n", quote(name), how)
		cfg.otherKinds(a, name)
		return exitNothing
	case admin.ActionRecalled:
		fmt.Fprintf(cfg.out, "recalled %s from %s (token %d, instance %s), which keeps it cached: nobody else gets it until that holder lets go, at once if unused, else at its next renewal\n",
			quote(name), was.Owner, was.Token, instance(r.Evicted.Instance))
	case admin.ActionGranted:
		fmt.Fprintf(cfg.out, "took %s from %s (token %d, instance %s)\n", quote(name), was.Owner, was.Token, instance(r.Evicted.Instance))
		fmt.Fprintf(cfg.out, "granted to %s with token %d\n", r.Grantee, r.Token())
	default:
		fmt.Fprintf(cfg.out, "took %s from %s (token %d, instance %s)\n", quote(name), was.Owner, was.Token, instance(r.Evicted.Instance))
		fmt.Fprintf(cfg.out, "freed: released marker, token %d (the next lock's is higher)\n", r.Token())
	}
	return exitOK
}

// otherKinds tells, after a lock release found nothing to release, how to
// release the semaphore or election of the same name, if there is one.
func (cfg *config) otherKinds(a *admin.Admin, name string) {
	ctx, cancel := cfg.ctx()
	ns, err := a.InspectAll(ctx, name)
	cancel()
	if err != nil {
		return // a hint only
	}
	for _, n := range ns {
		switch {
		case n.Kind == admin.KindSemaphore && len(n.Holders) > 0:
			fmt.Fprintf(cfg.err, "note: %s is also a semaphore with %d of %d permits held: `baton release -force -member MEMBER %s` takes one (`baton show %s` lists them)\n",
				quote(name), len(n.Holders), n.Limit, quote(name), quote(name))
		case n.Kind == admin.KindElection && len(n.Holders) > 0:
			fmt.Fprintf(cfg.err, "note: %s is also an election: `baton release -force -kind election %s` takes the leadership\n", quote(name), quote(name))
		}
	}
}

// releaseHolder force-releases a semaphore's permit or an election's
// leadership with force and says what it did.
func (cfg *config) releaseHolder(a *admin.Admin, kind admin.Kind, name, member string, force func(ctx context.Context, name, member string) (admin.Released, error)) int {
	ctx, cancel := cfg.ctx()
	r, err := force(ctx, name, member)
	cancel()
	if err != nil {
		return cfg.fail(err)
	}
	what := "a permit of semaphore"
	if kind == admin.KindElection {
		what = "the leadership of election"
	}
	if r.Action == admin.ActionNone { // an election without a leader
		fmt.Fprintf(cfg.err, "baton: nobody leads election %s: nothing released\n", quote(name))
		for _, h := range r.Was.Holders {
			fmt.Fprintf(cfg.err, "note: %s was granted the leadership and has not taken it yet; `baton release -force -member %s %s` takes it from it\n", h.Member, h.Member, quote(name))
		}
		return exitNothing
	}
	h := r.Evicted
	value := ""
	if kind == admin.KindElection {
		value = fmt.Sprintf(", value %q", h.Value)
	}
	fmt.Fprintf(cfg.out, "took %s %s from %s (token %d%s, instance %s)\n", what, quote(name), h.Member, h.Token, value, instance(h.Instance))
	switch {
	case r.Action == admin.ActionFreed:
		fmt.Fprintf(cfg.out, "freed: nobody was queued; the next token is above %d\n", r.Token())
	case r.Grantee == "":
		fmt.Fprintf(cfg.out, "granted to the first queued session (it released since)\n")
	default:
		fmt.Fprintf(cfg.out, "granted to %s with token %d\n", r.Grantee, r.Token())
	}
	return exitOK
}
