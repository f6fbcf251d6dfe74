package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/batonlock/baton/admin"
)

// verbFlags parses a verb's flags, which may come before or after its one
// argument, NAME (want false: no argument).
func (cfg *config) verbFlags(fs *flag.FlagSet, synopsis string, args []string, want bool) (name string, code int, ok bool) {
	fs.SetOutput(cfg.err)
	fs.Usage = func() {
		fmt.Fprintf(cfg.err, "usage: baton [flags] %s\n", synopsis)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", exitOK, false
		}
		return "", exitUsage, false
	}
	if want && fs.NArg() > 0 {
		name = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return "", exitUsage, false
		}
	}
	switch {
	case want && name == "":
		fmt.Fprintf(cfg.err, "baton %s: missing NAME\n", fs.Name())
		fs.Usage()
		return "", exitUsage, false
	case fs.NArg() > 0:
		fmt.Fprintf(cfg.err, "baton %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return "", exitUsage, false
	}
	return name, exitOK, true
}

func (cfg *config) parseLs(args []string) (func(*admin.Admin) int, int) {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	match := fs.String("match", "*", "list only the names matching this Redis glob")
	if _, code, ok := cfg.verbFlags(fs, "ls [-match GLOB]", args, false); !ok {
		return nil, code
	}
	return func(a *admin.Admin) int { return cfg.ls(a, *match) }, exitOK
}

// ls follows List's cursors to the end and prints the names sorted, one a
// line.
func (cfg *config) ls(a *admin.Admin, match string) int {
	byName := map[string]admin.Name{}
	for cursor := ""; ; {
		ctx, cancel := cfg.ctx()
		names, next, err := a.List(ctx, match, cursor)
		cancel()
		if err != nil {
			return cfg.fail(err)
		}
		for _, n := range names {
			byName[n.Name] = n // List may return a name twice
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	w := tabwriter.NewWriter(cfg.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tSTATE\tTOKEN\tLEASE\tQUEUE")
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		n := byName[name]
		lease := "-"
		if n.Held {
			lease = n.LeaseLeft.String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", quote(n.Name), state(n), token(n), lease, n.QueueLen)
	}
	if err := w.Flush(); err != nil {
		return cfg.fail(err)
	}
	return exitOK
}

func state(n admin.Name) string {
	switch {
	case n.Held:
		return "held"
	case n.Foreign:
		return "foreign"
	}
	return "free"
}

// token is the holder's token, or the last one issued (a marker's); "-"
// when the key says nothing of tokens.
func token(n admin.Name) string {
	if n.Held || n.Marker {
		return strconv.FormatUint(n.Token, 10)
	}
	return "-"
}

// quote leaves printable names as they are and quotes the others, so that
// each takes one line and one column.
func quote(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

func (cfg *config) parseShow(args []string) (func(*admin.Admin) int, int) {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	name, code, ok := cfg.verbFlags(fs, "show NAME", args, true)
	if !ok {
		return nil, code
	}
	return func(a *admin.Admin) int { return cfg.show(a, name) }, exitOK
}

// show prints a name's fields, one a line, then its queue.
func (cfg *config) show(a *admin.Admin, name string) int {
	ctx, cancel := cfg.ctx()
	n, err := a.Inspect(ctx, name)
	cancel()
	if err != nil {
		return cfg.fail(err)
	}
	w := tabwriter.NewWriter(cfg.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "name:\t%s\n", quote(n.Name))
	switch {
	case n.Held:
		fmt.Fprintf(w, "state:\theld\n")
		fmt.Fprintf(w, "holder:\t%s\t(owner token: session %s, fence %d)\n", n.Owner, n.Member(), n.Fence)
		fmt.Fprintf(w, "token:\t%d\n", n.Token)
		fmt.Fprintf(w, "lease:\t%v left\n", n.LeaseLeft)
	case n.Marker:
		fmt.Fprintf(w, "state:\tfree (released marker)\n")
		fmt.Fprintf(w, "token:\t%d\t(the last issued; the next is higher)\n", n.Token)
	case n.Foreign:
		fmt.Fprintf(w, "state:\tforeign (a value baton did not write)\n")
		fmt.Fprintf(w, "value:\t%q\n", n.Value)
	default:
		fmt.Fprintf(w, "state:\tfree (no key)\n")
	}
	fmt.Fprintf(w, "queue:\t%d\n", n.QueueLen)
	if err := w.Flush(); err != nil {
		return cfg.fail(err)
	}
	if len(n.Queue) == 0 {
		return exitOK
	}
	w = tabwriter.NewWriter(cfg.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\t#\tMEMBER\tDEADLINE (REDIS CLOCK)\tLEFT\tLEASE")
	for i, e := range n.Queue {
		deadline, left := "-", "dead"
		if !e.Deadline.IsZero() {
			deadline = e.Deadline.UTC().Format(time.RFC3339Nano)
		}
		if e.Left > 0 {
			left = e.Left.String()
		}
		fmt.Fprintf(w, "\t%d\t%s\t%s\t%s\t%v\n", i+1, e.Member, deadline, left, e.Lease)
	}
	if n.QueueLen > len(n.Queue) {
		fmt.Fprintf(w, "\t...\t%d more\n", n.QueueLen-len(n.Queue))
	}
	if err := w.Flush(); err != nil {
		return cfg.fail(err)
	}
	return exitOK
}

func (cfg *config) parseRelease(args []string) (func(*admin.Admin) int, int) {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	force := fs.Bool("force", false, "evict the holder (required)")
	name, code, ok := cfg.verbFlags(fs, "release -force NAME", args, true)
	if !ok {
		return nil, code
	}
	if !*force {
		fmt.Fprintf(cfg.err, "baton: refusing to release %s without -force: it evicts the holder, "+
			"which goes on working until it notices (at once, or at its next renewal within a third of its lease), "+
			"and its writes are then refused only by a resource that checks fencing tokens. "+
			"Run `baton release -force %s` to do it anyway.\n", quote(name), quote(name))
		return nil, exitUsage
	}
	return func(a *admin.Admin) int { return cfg.release(a, name) }, exitOK
}

// release force-releases name and says whom it took the lock from and
// what it did.
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
		fmt.Fprintf(cfg.out, "%s is not held (%s): nothing changed\n", quote(name), how)
		return exitOK
	case admin.ActionGranted:
		fmt.Fprintf(cfg.out, "took %s from %s (token %d)\n", quote(name), was.Owner, was.Token)
		fmt.Fprintf(cfg.out, "granted to %s with token %d\n", r.Grantee, r.Token())
	default:
		fmt.Fprintf(cfg.out, "took %s from %s (token %d)\n", quote(name), was.Owner, was.Token)
		fmt.Fprintf(cfg.out, "freed: released marker, token %d (the next lock's is higher)\n", r.Token())
	}
	return exitOK
}
