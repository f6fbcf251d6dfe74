package batonhttp

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
)

// pages renders the views for browsers. html/template escapes every lock
// name, owner and message by its context (text, attribute, URL), so a
// name such as "<script>" shows as text; links are built with url.Values.
var pages = template.Must(template.New("").Parse(`
{{define "head"}}<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>baton: {{.}}</title>
<style>
body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;margin-bottom:1.5em}
th,td{border:1px solid #bbb;padding:2px 8px;text-align:left;font-family:monospace;white-space:nowrap}
th{background:#eee;font-family:sans-serif}.error{color:#a00;font-weight:bold}
</style></head><body>
<nav><a href="?">this process</a> · <a href="?scope=redis">redis</a></nav>
<h1>{{.}}</h1>
{{end}}
{{define "foot"}}</body></html>
{{end}}
{{define "error"}}{{template "head" "error"}}<p class="error" id="error">{{.Status}}: {{.Message}}</p>{{template "foot"}}{{end}}
{{define "process"}}{{template "head" "locks of this process"}}
{{if .Error}}<p class="error" id="error">{{.Error}}</p>{{end}}
<h2>sessions</h2>
<table id="sessions"><tr><th>session</th><th>default</th><th>lease ttl</th></tr>
{{range .Sessions}}<tr><td>{{.ID}}</td><td>{{.Default}}</td><td>{{.LeaseTTLMs}} ms</td></tr>
{{end}}</table>
<h2>held locks</h2>
<table id="held"><tr><th>session</th><th>name</th><th>token</th><th>owner</th><th>acquired at</th><th>lease deadline</th></tr>
{{range .Held}}<tr><td>{{.Session}}</td><td>{{.Name}}</td><td>{{.Token}}</td><td>{{.Owner}}</td><td>{{.AcquiredAt}}</td><td>{{.LeaseDeadline}}</td></tr>
{{else}}<tr><td colspan="6">none</td></tr>
{{end}}</table>
<h2>waiting</h2>
<table id="waiting"><tr><th>session</th><th>name</th><th>goroutines</th></tr>
{{range .Waiting}}<tr><td>{{.Session}}</td><td>{{.Name}}</td><td>{{.Goroutines}}</td></tr>
{{else}}<tr><td colspan="3">none</td></tr>
{{end}}</table>
<h2>stats</h2>
<table id="stats">{{range .Stats}}<tr><th>{{.Name}}</th><td>{{.Value}}</td></tr>
{{end}}</table>
{{template "foot"}}{{end}}
{{define "list"}}{{template "head" "locks in redis"}}
<form method="get"><input type="hidden" name="scope" value="redis">
match <input name="match" value="{{.Match}}" placeholder="*"> <button>list</button></form>
<p>one page of a SCAN walk{{if .Cursor}} from cursor {{.Cursor}}{{end}}; names are sorted within the page.</p>
<table id="names"><tr><th>name</th><th>state</th><th>owner</th><th>token</th><th>fence</th><th>lease left</th><th>queued</th></tr>
{{range .Names}}<tr><td><a href="{{.Link}}">{{.Name}}</a></td><td>{{.State}}</td><td>{{.Owner}}</td><td>{{.Token}}</td><td>{{.Fence}}</td><td>{{.LeaseLeftMs}} ms</td><td>{{.QueueLen}}</td></tr>
{{else}}<tr><td colspan="7">no names on this page</td></tr>
{{end}}</table>
{{if .Next}}<p><a id="next" href="{{.Next}}">next page</a></p>{{else}}<p id="done">end of the walk</p>{{end}}
{{template "foot"}}{{end}}
{{define "lock"}}{{template "head" "lock in redis"}}
<table id="lock">
<tr><th>name</th><td>{{.Name}}</td></tr><tr><th>state</th><td>{{.State}}</td></tr>
<tr><th>owner</th><td>{{.Owner}}</td></tr><tr><th>token</th><td>{{.Token}}</td></tr>
<tr><th>fence</th><td>{{.Fence}}</td></tr><tr><th>lease left</th><td>{{.LeaseLeftMs}} ms</td></tr>
<tr><th>queued</th><td>{{.QueueLen}}</td></tr>
{{if .Foreign}}<tr><th>value</th><td>{{.Value}}</td></tr>{{end}}</table>
<h2>queue</h2>
<table id="queue"><tr><th>session</th><th>deadline</th><th>time left</th><th>lease</th></tr>
{{range .Queue}}<tr><td>{{.Member}}</td><td>{{.Deadline}}</td><td>{{.LeftMs}} ms</td><td>{{.LeaseMs}} ms</td></tr>
{{else}}<tr><td colspan="4">empty</td></tr>
{{end}}</table>
{{template "foot"}}{{end}}
`))

// The page types flatten the JSON views into the rows of the tables.
type (
	processPage struct {
		Error    string
		Sessions []sessionJSON
		Held     []heldRow
		Waiting  []waitingRow
		Stats    []statRow
	}
	heldRow struct {
		Session string
		heldJSON
	}
	waitingRow struct {
		Session string
		waitingJSON
	}
	statRow struct {
		Name  string
		Value string
	}
	listPage struct {
		redisListJSON
		Names []nameRow
		Next  string
	}
	nameRow struct {
		nameJSON
		State string
		Link  string
	}
	lockPage struct {
		nameRow
		Queue []entryJSON
	}
	errorPage struct {
		Status  int
		Message string
	}
)

// writeHTML renders v, one of the JSON views, as a page.
func writeHTML(w http.ResponseWriter, status int, v any) {
	var name string
	var data any
	switch v := v.(type) {
	case processJSON:
		name, data = "process", newProcessPage(v)
	case redisListJSON:
		name, data = "list", newListPage(v)
	case redisLockJSON:
		p := lockPage{nameRow: nameRow{nameJSON: v.Lock, State: state(v.Lock)}}
		if v.Lock.Queue != nil {
			p.Queue = *v.Lock.Queue
		}
		name, data = "lock", p
	case errorView:
		name, data = "error", errorPage{Status: status, Message: v.Error}
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

func newProcessPage(v processJSON) processPage {
	p := processPage{Error: v.Error, Sessions: v.Sessions}
	for _, s := range v.Sessions {
		for _, l := range s.Held {
			p.Held = append(p.Held, heldRow{Session: s.ID, heldJSON: l})
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
		{"waits", st.Waits}, {"timeouts", st.Timeouts}, {"lost", st.Lost},
		{"renewal_errors", st.RenewalErrors}, {"held", uint64(st.Held)},
	} {
		p.Stats = append(p.Stats, statRow{Name: r.k, Value: strconv.FormatUint(r.v, 10)})
	}
	return p
}

func newListPage(v redisListJSON) listPage {
	p := listPage{redisListJSON: v, Next: v.next}
	for _, n := range v.Names {
		p.Names = append(p.Names, nameRow{nameJSON: n, State: state(n), Link: v.links[n.Name]})
	}
	return p
}

// state names a name's state in one word for the tables.
func state(n nameJSON) string {
	switch {
	case n.Held:
		return "held"
	case n.Marker:
		return "released"
	case n.Foreign:
		return "foreign"
	default:
		return "free"
	}
}
