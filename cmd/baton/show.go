package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/batonlock/baton/admin"
)

func (cfg *config) parseShow(args []string) (func(*admin.Admin) int, int) {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	name, code, ok := cfg.verbFlags(fs, "show NAME", args, true)
	if !ok {
		return nil, code
	}
	return func(a *admin.Admin) int { return cfg.show(a, name) }, exitOK
}

// show prints each kind found under name (a free lock when none is): its
// fields one a line, then its holders and queue; a blank line between
// kinds.
func (cfg *config) show(a *admin.Admin, name string) int {
	ctx, cancel := cfg.ctx()
	ns, err := a.InspectAll(ctx, name)
	cancel()
	if err != nil {
		return cfg.fail(err)
	}
	for i, n := range ns {
		if i > 0 {
			fmt.Fprintln(cfg.out)
		}
		w := tabwriter.NewWriter(cfg.out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "name:\t%s\n", quote(n.Name))
		fmt.Fprintf(w, "kind:\t%s\n", n.Kind)
		switch n.Kind {
		case admin.KindSemaphore:
			showSemaphore(w, n)
		case admin.KindElection:
			showElection(w, n)
		default:
			showLock(w, n)
		}
		fmt.Fprintf(w, "queue:\t%d\n", n.QueueLen)
		if err := w.Flush(); err != nil {
			return cfg.fail(err)
		}
		if err := showQueue(cfg.out, n); err != nil {
			return cfg.fail(err)
		}
	}
	return exitOK
}

func showLock(w io.Writer, n admin.Name) {
	switch {
	case n.Held:
		st := "held"
		if n.Cached {
			st = "cached (held by its session between uses, until another session asks for it)"
		}
		fmt.Fprintf(w, "state:\t%s\n", st)
		fmt.Fprintf(w, "holder:\t%s\t(owner token: session %s, fence %d)\n", n.Owner, n.Member(), n.Fence)
		fmt.Fprintf(w, "instance:\t%s\n", instance(n.Instance))
		fmt.Fprintf(w, "token:\t%d\n", n.Token)
		fmt.Fprintf(w, "lease:\t%v left\n", n.LeaseLeft)
	case n.Marker:
		fmt.Fprintf(w, "state:\tfree (released marker)\n")
		fmt.Fprintf(w, "token:\t%d\t(the last issued; the next is higher)\n", n.Token)
	case n.Foreign:
		showForeign(w, n)
	default:
		fmt.Fprintf(w, "state:\tfree (no key)\n")
	}
}

func showForeign(w io.Writer, n admin.Name) {
	fmt.Fprintf(w, "state:\tforeign (a value baton did not write)\n")
	fmt.Fprintf(w, "value:\t%q\n", n.Value)
}

func showSemaphore(w io.Writer, n admin.Name) {
	limit := fmt.Sprint(n.Limit)
	if n.Limit == 0 {
		limit = "unknown (none stored)"
	}
	switch {
	case n.Held:
		fmt.Fprintf(w, "state:\theld (%d of %s permits)\n", len(n.Holders), limit)
	case n.Foreign:
		showForeign(w, n)
		return
	case n.Marker:
		fmt.Fprintf(w, "state:\tfree (no permit held; the last token is kept)\n")
	default:
		fmt.Fprintf(w, "state:\tfree (no key)\n")
	}
	fmt.Fprintf(w, "limit:\t%s\n", limit)
	if n.Marker || n.Held {
		fmt.Fprintf(w, "token:\t%d\t(the last issued; the next is higher)\n", n.Token)
	}
	fmt.Fprintf(w, "holders:\t%d\n", len(n.Holders))
	if len(n.Holders) > 0 {
		fmt.Fprintln(w, "\t#\tMEMBER\tINSTANCE\tTOKEN\tLEASE LEFT")
		for i, h := range n.Holders {
			fmt.Fprintf(w, "\t%d\t%s\t%s\t%d\t%v\n", i+1, h.Member, instance(h.Instance), h.Token, h.LeaseLeft)
		}
	}
}

func showElection(w io.Writer, n admin.Name) {
	switch {
	case n.Held:
		fmt.Fprintf(w, "state:\theld (it leads)\n")
		fmt.Fprintf(w, "leader:\t%s\t(owner token %s)\n", n.Member(), n.Owner)
		fmt.Fprintf(w, "value:\t%q\n", n.Value)
		fmt.Fprintf(w, "instance:\t%s\n", instance(n.Instance))
		fmt.Fprintf(w, "token:\t%d\n", n.Token)
		fmt.Fprintf(w, "lease:\t%v left\n", n.LeaseLeft)
	case n.Foreign:
		showForeign(w, n)
		return
	case len(n.Holders) > 0:
		fmt.Fprintf(w, "state:\tpending (granted the leadership, not leading yet: nobody leads)\n")
	case n.Marker:
		fmt.Fprintf(w, "state:\tfree (nobody leads; the last token is kept)\n")
		fmt.Fprintf(w, "token:\t%d\t(the last issued; the next is higher)\n", n.Token)
	default:
		fmt.Fprintf(w, "state:\tfree (no key)\n")
	}
	for _, h := range n.Holders {
		if h.Pending {
			fmt.Fprintf(w, "pending:\t%s\t(value %q, instance %s, token %d, lease %v left)\n", h.Member, h.Value, instance(h.Instance), h.Token, h.LeaseLeft)
		}
	}
}

// showQueue prints the queued sessions (with their campaign values for an
// election), oldest first.
func showQueue(out io.Writer, n admin.Name) error {
	if len(n.Queue) == 0 {
		return nil
	}
	elect := n.Kind == admin.KindElection
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	header := "\t#\tMEMBER\tINSTANCE\tDEADLINE (REDIS CLOCK)\tLEFT\tLEASE"
	if elect {
		header += "\tVALUE"
	}
	fmt.Fprintln(w, header)
	for i, e := range n.Queue {
		deadline, left := "-", "dead"
		if !e.Deadline.IsZero() {
			deadline = e.Deadline.UTC().Format(time.RFC3339Nano)
		}
		if e.Left > 0 {
			left = e.Left.String()
		}
		fmt.Fprintf(w, "\t%d\t%s\t%s\t%s\t%s\t%v", i+1, e.Member, instance(e.Instance), deadline, left, e.Lease)
		if elect {
			fmt.Fprintf(w, "\t%q", e.Value)
		}
		fmt.Fprintln(w)
	}
	if n.QueueLen > len(n.Queue) {
		fmt.Fprintf(w, "\t...\t%d more\n", n.QueueLen-len(n.Queue))
	}
	return w.Flush()
}
