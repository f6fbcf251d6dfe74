package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/batonlock/baton/admin"
)

// verbFlags parses a verb's flags, which may come before or after its one
// argument, NAME (want false: no argument). -h prints the verb's usage;
// an error is one line with a pointer to the help.
func (cfg *config) verbFlags(fs *flag.FlagSet, synopsis string, args []string, want bool) (name string, code int, ok bool) {
	fs.SetOutput(cfg.out)
	fs.Usage = func() {
		fmt.Fprintf(cfg.out, "usage: baton [flags] %s\n", synopsis)
		fs.PrintDefaults()
	}
	err := quietParse(fs, args)
	if err == nil && want && fs.NArg() > 0 {
		name = fs.Arg(0)
		err = quietParse(fs, fs.Args()[1:])
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return "", exitOK, false
	case err != nil:
		return "", cfg.verbError(fs.Name(), err.Error()), false
	case want && name == "":
		return "", cfg.verbError(fs.Name(), "missing NAME"), false
	case fs.NArg() > 0:
		return "", cfg.verbError(fs.Name(), fmt.Sprintf("unexpected argument %q", fs.Arg(0))), false
	}
	return name, exitOK, true
}

// verbError reports bad usage of verb in one line, with a pointer to the
// help.
func (cfg *config) verbError(verb, msg string) int {
	fmt.Fprintf(cfg.err, "baton %s: %s (%s)\n", verb, msg, helpPointer)
	return exitUsage
}

func (cfg *config) parseLs(args []string) (func(*admin.Admin) int, int) {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	match := fs.String("match", "*", "list only the names matching this Redis glob")
	kind := fs.String("kind", "", "list only this kind: lock, semaphore or election (default all three)")
	if _, code, ok := cfg.verbFlags(fs, "ls [-match GLOB] [-kind KIND]", args, false); !ok {
		return nil, code
	}
	if *kind != "" && !slices.Contains(kinds, admin.Kind(*kind)) {
		return nil, cfg.verbError("ls", fmt.Sprintf("-kind %q: want lock, semaphore or election", *kind))
	}
	return func(a *admin.Admin) int { return cfg.ls(a, *match, admin.Kind(*kind)) }, exitOK
}

// kinds are the kinds in the order ls and show print them.
var kinds = []admin.Kind{admin.KindLock, admin.KindSemaphore, admin.KindElection}

// ls follows List's cursors to the end and prints the names sorted, then
// by kind, one a line; only those of kind unless it is "".
func (cfg *config) ls(a *admin.Admin, match string, kind admin.Kind) int {
	type key struct {
		name string
		kind int
	}
	byKey := map[key]admin.Name{}
	for cursor := ""; ; {
		ctx, cancel := cfg.ctx()
		names, next, err := a.List(ctx, match, cursor)
		cancel()
		if err != nil {
			return cfg.fail(err)
		}
		for _, n := range names {
			if kind == "" || n.Kind == kind {
				byKey[key{n.Name, slices.Index(kinds, n.Kind)}] = n // List may return a name twice
			}
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	w := tabwriter.NewWriter(cfg.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tNAME\tSTATE\tTOKEN\tLEASE\tQUEUE\tHOLDERS\tINSTANCE")
	for _, k := range slices.SortedFunc(maps.Keys(byKey), func(x, y key) int {
		return cmp.Or(strings.Compare(x.name, y.name), x.kind-y.kind)
	}) {
		n := byKey[k]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", n.Kind, quote(n.Name), state(n), token(n), soonest(n), n.QueueLen, holders(n), instances(n))
	}
	if err := w.Flush(); err != nil {
		return cfg.fail(err)
	}
	return exitOK
}

// state names a name's state in one word, the same in ls, show, the page
// and the docs (docs/operating.md, "State words"): held (a lock's holder,
// a semaphore's permit holders, an election's leader), cached (a lock its
// session keeps between uses, admin.Name.Cached), pending (an election's
// holder not leading yet), free or foreign.
func state(n admin.Name) string {
	switch {
	case n.Held && n.Cached:
		return "cached"
	case n.Held:
		return "held"
	case n.Foreign:
		return "foreign"
	case len(n.Holders) > 0:
		return "pending"
	}
	return "free"
}

// token is the holder's token, or the last one issued (a semaphore's
// always); "-" when the keys say nothing of tokens.
func token(n admin.Name) string {
	if n.Held || n.Marker || len(n.Holders) > 0 {
		return strconv.FormatUint(n.Token, 10)
	}
	return "-"
}

// soonest is the soonest lease left among the holders: a lock's, the
// permit that frees first unless renewed, an election's leader's.
func soonest(n admin.Name) string {
	if len(n.Holders) == 0 {
		return "-"
	}
	d := n.Holders[0].LeaseLeft
	for _, h := range n.Holders[1:] {
		d = min(d, h.LeaseLeft)
	}
	return d.String()
}

// holders is how many hold, of how many may: "2/3".
func holders(n admin.Name) string {
	switch {
	case n.Foreign:
		return "-"
	case n.Kind == admin.KindLock:
		return fmt.Sprintf("%d/1", len(n.Holders))
	case n.Limit == 0:
		return fmt.Sprintf("%d/?", len(n.Holders))
	}
	return fmt.Sprintf("%d/%d", len(n.Holders), n.Limit)
}

// instances lists the holders' instances once each, "?" for one unknown.
func instances(n admin.Name) string {
	var out []string
	for _, h := range n.Holders {
		if i := instance(h.Instance); !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

// instance shows an instance in one column: "?" when unknown, quoted when
// it holds spaces or unprintable bytes.
func instance(s string) string {
	if s == "" {
		return "?"
	}
	if strings.ContainsAny(s, " \t,") {
		return strconv.Quote(s)
	}
	return quote(s)
}

// quote leaves printable names as they are and quotes the others, so that
// each takes one line and one column.
func quote(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}
