package batonhttp

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// pages renders the views for browsers: an operator's view, with times
// relative to the moment of reading, that fits a 1280-pixel window (long
// names, members and instances wrap; nothing else is wide). html/template
// escapes every name, owner, instance and message by its context (text,
// attribute, URL), so a name such as "<script>" shows as text; links are
// built with url.Values. The one script is the refresh toggle: plain
// JavaScript, its state kept in the browser's localStorage.
var pages = template.Must(template.New("").Funcs(template.FuncMap{"join": strings.Join}).Parse(`
{{define "head"}}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>baton: {{.Title}}</title>
<style>
*{box-sizing:border-box}
body{font:14px system-ui,sans-serif;margin:1em 1.5em;color:#222}
header{border-bottom:1px solid #ddd;margin-bottom:1em;padding-bottom:.5em}
nav{display:flex;gap:1.5em;align-items:center;flex-wrap:wrap}
nav label{margin-left:auto}
h1{font-size:1.4em;margin:.5em 0 .3em}
h2{font-size:1.1em;margin:1.2em 0 .4em}
.where{margin:.2em 0;color:#444;overflow-wrap:anywhere}
.where b{font-family:ui-monospace,monospace;font-weight:600;color:#000}
.note{color:#555}
table{border-collapse:collapse;margin-bottom:1em;max-width:100%}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f0f0f0;font-weight:600}
td{font-family:ui-monospace,monospace;font-size:13px}
td.wrap{white-space:normal;overflow-wrap:anywhere;min-width:10em}
.error{color:#a00;font-weight:bold}
</style></head><body>
<header>
<nav><a href="?">this process</a><a href="?scope=redis">all instances (redis)</a>
<label><input type="checkbox" id="refresh"> refresh every 2 s</label></nav>
<h1>{{.Title}}</h1>
{{with .Info}}<p class="where" id="where">instance <b id="instance">{{.Instance}}</b> · redis <b id="redis">{{join .Redis ", "}}</b> · key prefix <b id="prefix">{{.Prefix}}</b> · read at <span id="read-at">{{.ReadAt}}</span></p>{{end}}
</header>
{{end}}
{{define "foot"}}<script>
(function () {
  var box = document.getElementById("refresh"), key = "batonhttp.refresh", timer;
  function arm() {
    clearTimeout(timer);
    if (box.checked) timer = setTimeout(function () { location.reload(); }, 2000);
  }
  try { box.checked = localStorage.getItem(key) === "1"; } catch (e) {}
  box.addEventListener("change", function () {
    try { localStorage.setItem(key, box.checked ? "1" : "0"); } catch (e) {}
    arm();
  });
  arm();
})();
</script>
</body></html>
{{end}}
{{define "error"}}{{template "head" .Head}}<p class="error" id="error">{{.Status}}: {{.Message}}</p>
{{if .Lookup}}<form method="get" id="lookup"><input type="hidden" name="scope" value="redis">
name <input name="name"> <button>show</button></form>{{end}}{{template "foot"}}{{end}}
{{define "process"}}{{template "head" .Head}}
{{if .Error}}<p class="error" id="error">{{.Error}}</p>{{end}}
<h2>held</h2>
<table id="held"><tr><th>kind</th><th>name</th><th>token</th><th>held</th><th>lease left</th><th>session</th></tr>
{{range .Held}}<tr><td>{{.What}}</td><td class="wrap">{{.Name}}</td><td>{{.Token}}</td><td>{{.HeldFor}}</td><td>{{.LeaseLeft}}</td><td class="wrap" title="owner token {{.Owner}}">{{.Session}}</td></tr>
{{else}}<tr><td colspan="6">nothing</td></tr>
{{end}}</table>
<h2>waiting</h2>
<table id="waiting"><tr><th>session</th><th>name</th><th>goroutines</th></tr>
{{range .Waiting}}<tr><td class="wrap">{{.Session}}</td><td class="wrap">{{.Name}}</td><td>{{.Goroutines}}</td></tr>
{{else}}<tr><td colspan="3">nobody</td></tr>
{{end}}</table>
<h2>sessions</h2>
<table id="sessions"><tr><th>session</th><th>default</th><th>lease</th><th>holds</th><th>waiting goroutines</th></tr>
{{range .Sessions}}<tr><td class="wrap">{{.ID}}</td><td>{{if .Default}}yes{{end}}</td><td>{{.Lease}}</td><td>{{.Holds}}</td><td>{{.Waits}}</td></tr>
{{end}}</table>
<h2>counters since the client started</h2>
<table id="stats"><tr>{{range .Stats}}<th>{{.Name}}</th>{{end}}</tr>
<tr>{{range .Stats}}<td>{{.Value}}</td>{{end}}</tr></table>
{{template "foot"}}{{end}}
{{define "list"}}{{template "head" .Head}}
<form method="get"><input type="hidden" name="scope" value="redis">
match <input name="match" value="{{.Match}}" placeholder="*"> <button>list</button></form>
<p class="note">Locks, semaphores and elections of every instance: one page of a SCAN walk{{if .Cursor}} from cursor {{.Cursor}}{{end}}, sorted within the page.</p>
<table id="names"><tr><th>kind</th><th>name</th><th>state</th><th>holders</th><th>token</th><th>lease left</th><th>queued</th><th>instance</th></tr>
{{range .Names}}<tr><td>{{.Kind}}</td><td class="wrap"><a href="{{.Link}}">{{.Name}}</a></td><td>{{.State}}</td><td>{{.HolderCount}}</td><td>{{.Token}}</td><td>{{.LeaseLeft}}</td><td>{{.QueueLen}}</td><td class="wrap">{{.Instances}}</td></tr>
{{else}}<tr><td colspan="8">no names on this page</td></tr>
{{end}}</table>
{{if .Next}}<p><a id="next" href="{{.Next}}">next page</a></p>{{else}}<p id="done" class="note">end of the walk</p>{{end}}
{{template "foot"}}{{end}}
{{define "lock"}}{{template "head" .Head}}
{{range .Kinds}}<h2>{{.Kind}}</h2>
<table id="{{.Kind}}">
<tr><th>name</th><td class="wrap">{{.Name}}</td></tr><tr><th>state</th><td>{{.State}}</td></tr>
{{if .Owner}}<tr><th>{{if eq .Kind "election"}}leader{{else}}holder{{end}}</th><td class="wrap">{{.Owner}}</td></tr><tr><th>instance</th><td class="wrap">{{.Instance}}</td></tr>
<tr><th>lease left</th><td>{{.LeaseLeft}}</td></tr>{{end}}
{{if .Value}}<tr><th>value</th><td class="wrap">{{.Value}}</td></tr>{{end}}
<tr><th>token</th><td>{{.Token}}</td></tr><tr><th>fence</th><td>{{.Fence}}</td></tr>
{{if eq .Kind "semaphore"}}<tr><th>limit</th><td>{{.Limit}}</td></tr>{{end}}
<tr><th>queued</th><td>{{.QueueLen}}</td></tr></table>
{{if ne .Kind "lock"}}<h3>holders</h3>
<table id="{{.Kind}}-holders"><tr><th>member</th><th>instance</th><th>token</th><th>lease left</th>{{if eq .Kind "election"}}<th>value</th><th>leading</th>{{end}}</tr>
{{range .HolderRows}}<tr><td class="wrap">{{.Member}}</td><td class="wrap">{{.Instance}}</td><td>{{.Token}}</td><td>{{.LeaseLeft}}</td>{{if .Election}}<td class="wrap">{{.Value}}</td><td>{{if .Pending}}not yet (granted){{else}}yes{{end}}</td>{{end}}</tr>
{{else}}<tr><td colspan="6">none</td></tr>
{{end}}</table>{{end}}
<h3>queue</h3>
<table id="{{.Kind}}-queue"><tr><th>member</th><th>instance</th><th>entry left</th><th>lease</th>{{if eq .Kind "election"}}<th>value</th>{{end}}</tr>
{{range .QueueRows}}<tr><td class="wrap">{{.Member}}</td><td class="wrap">{{.Instance}}</td><td>{{.Left}}</td><td>{{.Lease}}</td>{{if .Election}}<td class="wrap">{{.Value}}</td>{{end}}</tr>
{{else}}<tr><td colspan="5">empty</td></tr>
{{end}}</table>
{{end}}{{template "foot"}}{{end}}
`))

// The page types flatten the JSON views into the rows of the tables.
type (
	// head is what the top of every page shows.
	head struct {
		Title string
		Info  *pageInfo // nil on error pages
	}
	// pageInfo says which process, Redis and prefix a page shows.
	pageInfo struct {
		Instance string
		Redis    []string
		Prefix   string
		ReadAt   string
	}
	processPage struct {
		Head     head
		Error    string
		Held     []heldRow
		Waiting  []waitingRow
		Sessions []sessionRow
		Stats    []statRow
	}
	heldRow struct {
		heldJSON
		What, Session, HeldFor, LeaseLeft string
	}
	waitingRow struct {
		Session string
		waitingJSON
	}
	sessionRow struct {
		ID           string
		Default      bool
		Lease        string
		Holds, Waits int
	}
	statRow struct {
		Name  string
		Value string
	}
	listPage struct {
		Head head
		redisListJSON
		Names []nameRow
		Next  string
	}
	nameRow struct {
		nameJSON
		State, HolderCount, LeaseLeft, Instances, Link string
		Value                                          string // foreign: the value; an election's leader's value, quoted
		HolderRows                                     []holderRow
		QueueRows                                      []queueRow
	}
	holderRow struct {
		holderJSON
		Instance, LeaseLeft string
		Election            bool
	}
	queueRow struct {
		entryJSON
		Instance, Left, Lease string
		Election              bool
	}
	lockPage struct {
		Head  head
		Kinds []nameRow
	}
	errorPage struct {
		Head    head
		Status  int
		Message string
		Lookup  bool // a form to look one name up (the listing needs SCAN, a name's page not)
	}
)

// writeHTML renders v, one of the JSON views, as a page; info is nil for
// errors.
func writeHTML(w http.ResponseWriter, status int, v any, info *pageInfo) {
	var name string
	var data any
	switch v := v.(type) {
	case processJSON:
		name, data = "process", newProcessPage(v, info)
	case redisListJSON:
		name, data = "list", newListPage(v, info)
	case redisLockJSON:
		p := lockPage{Head: head{Title: "in redis: " + v.Lock.Name, Info: info}}
		if v.lockFound || v.Semaphore == nil && v.Election == nil {
			p.Kinds = append(p.Kinds, newNameRow(v.Lock, ""))
		}
		for _, n := range []*nameJSON{v.Semaphore, v.Election} {
			if n != nil {
				p.Kinds = append(p.Kinds, newNameRow(*n, ""))
			}
		}
		name, data = "lock", p
	case errorView:
		name, data = "error", errorPage{Head: head{Title: "error"}, Status: status, Message: v.Error, Lookup: v.lookup}
	default:
		panic(fmt.Sprintf("batonhttp: no page for %T", v))
	}
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, "batonhttp: render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// whatHeld names what a session holds: a lock, a semaphore's permit or an
// election's leadership.
var whatHeld = map[string]string{"lock": "lock", "semaphore": "permit", "election": "leadership"}

func newProcessPage(v processJSON, info *pageInfo) processPage {
	p := processPage{Head: head{Title: "held and awaited by this process", Info: info}, Error: v.Error}
	for _, s := range v.Sessions {
		p.Sessions = append(p.Sessions, sessionRow{ID: s.ID, Default: s.Default, Lease: ago(time.Duration(s.LeaseTTLMs) * time.Millisecond),
			Holds: len(s.Held), Waits: waiters(s.Waiting)})
		for _, l := range s.Held {
			p.Held = append(p.Held, heldRow{heldJSON: l, What: whatHeld[l.Kind], Session: s.ID,
				HeldFor: ago(v.read.Sub(l.acquired)), LeaseLeft: left(l.deadline.Sub(v.read))})
		}
		for _, n := range s.Waiting {
			p.Waiting = append(p.Waiting, waitingRow{Session: s.ID, waitingJSON: n})
		}
	}
	st := v.Stats
	for _, r := range []struct {
		k string
		v uint64
	}{
		{"acquired", st.Acquired}, {"local_handoffs", st.LocalHandoffs}, {"granted", st.Granted},
		{"cached", st.Cached}, {"waits", st.Waits}, {"timeouts", st.Timeouts}, {"lost", st.Lost},
		{"renewal_errors", st.RenewalErrors}, {"held", uint64(st.Held)},
	} {
		p.Stats = append(p.Stats, statRow{Name: r.k, Value: strconv.FormatUint(r.v, 10)})
	}
	return p
}

func waiters(ws []waitingJSON) int {
	n := 0
	for _, w := range ws {
		n += w.Goroutines
	}
	return n
}

func newListPage(v redisListJSON, info *pageInfo) listPage {
	p := listPage{Head: head{Title: "in redis, for every instance", Info: info}, redisListJSON: v, Next: v.next}
	for _, n := range v.Names {
		p.Names = append(p.Names, newNameRow(n, v.links[n.Name]))
	}
	return p
}

// newNameRow makes the cells of one name of one kind.
func newNameRow(n nameJSON, link string) nameRow {
	r := nameRow{nameJSON: n, State: state(n), Link: link, LeaseLeft: "-", Instances: "-", Value: n.Value}
	elect := n.Kind == "election"
	if elect && n.Held {
		r.Value = strconv.Quote(n.Value)
	}
	limit := "1"
	if n.Kind == "semaphore" {
		limit = strconv.Itoa(n.Limit)
	}
	r.HolderCount = fmt.Sprintf("%d of %s", len(n.Holders), limit)
	if n.Foreign {
		r.HolderCount = "-"
	}
	var insts []string
	soonest := time.Duration(-1)
	for _, h := range n.Holders {
		if inst := known(h.Instance); !slices.Contains(insts, inst) {
			insts = append(insts, inst)
		}
		hr := holderRow{holderJSON: h, Instance: known(h.Instance), LeaseLeft: left(ms(h.LeaseLeftMs)), Election: elect}
		if elect {
			hr.Value = strconv.Quote(h.Value)
		}
		r.HolderRows = append(r.HolderRows, hr)
		if d := ms(h.LeaseLeftMs); soonest < 0 || d < soonest {
			soonest = d
		}
	}
	if len(insts) > 0 {
		r.Instances = strings.Join(insts, ", ")
	}
	switch {
	case n.Owner != "": // a lock's holder, an election's leader
		r.LeaseLeft, r.Instance = left(ms(n.LeaseLeftMs)), known(n.Instance)
	case soonest >= 0: // a semaphore's: the permit that frees first unless renewed
		r.LeaseLeft = left(soonest)
	}
	if n.Queue != nil {
		for _, e := range *n.Queue {
			q := queueRow{entryJSON: e, Instance: known(e.Instance), Left: left(ms(e.LeftMs)), Lease: ago(ms(e.LeaseMs)), Election: elect}
			if elect {
				q.Value = strconv.Quote(e.Value)
			}
			r.QueueRows = append(r.QueueRows, q)
		}
	}
	return r
}

// state names a name's state in one word, the same in the JSON, the
// tables, baton ls and show, and the docs (docs/operating.md, "State
// words"): held (a lock's holder, a semaphore's permit holders, an
// election's leader), cached (a lock its session keeps between uses),
// pending (an election's holder not leading yet), free (with or without
// the last fence kept) or foreign.
func state(n nameJSON) string {
	switch {
	case n.Foreign:
		return "foreign"
	case n.Held && n.Cached:
		return "cached"
	case n.Held:
		return "held"
	case len(n.Holders) > 0:
		return "pending" // an election's holder, not leading yet
	default:
		return "free"
	}
}

// known shows an instance, "?" when Redis has no record of it.
func known(instance string) string {
	if instance == "" {
		return "?"
	}
	return instance
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// left shows a lease or an entry's time left, "expired" once it has run
// out (the holder is dead unless renewed at once).
func left(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return ago(d)
}

// ago shows a duration as people read it: "850 ms", "1.2 s", "3 min 5 s",
// "2 h 10 min", "3 d 4 h".
func ago(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d d %d h", int(d.Hours())/24, int(d.Hours())%24)
}
