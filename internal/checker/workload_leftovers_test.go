package checker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
)

// Client ids (the first 32 hex digits of their members) of the sessions
// leftoverRun knows: a cleanly closed Client, one whose Close a fault
// excuses, and a killed child.
var (
	cleanID   = strings.Repeat("a", 32)
	excusedID = strings.Repeat("b", 32)
	childID   = strings.Repeat("c", 32)
)

// leftoverRun is a run against a throwaway server with, as its record
// says: c0, a Client closed cleanly (session c0.s0, member cleanID-1);
// c1, one whose Close a fault excuses (a fault window within its lease
// before it); k1, a child killed after it said its session (childID-1);
// and k2, a child killed before it did, with pid 4242.
func leftoverRun(t *testing.T, cfg Workload) (*wrun, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	cfg.Options = func(int) baton.Options { return baton.Options{Redis: srv.Option()} }
	cfg.Redis = srv.Option
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	r, err := newWrun(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.rc.Close)
	r.t0, r.hard = time.Now().Add(-10*time.Second), context.Background()
	at := func(ms int) time.Time { return r.t0.Add(time.Duration(ms) * time.Millisecond) }
	client := func(label, id string, from, to int) *wclient {
		cl := &wclient{label: label}
		ws := &wsession{cl: cl, label: label + ".s0", lease: time.Second, member: id + "-1",
			closeStart: at(from), closeEnd: at(to), closedBy: "Client.Close"}
		cl.def, cl.all = ws, []*wsession{ws}
		r.members[ws.member] = ws
		r.clients = append(r.clients, cl)
		return cl
	}
	client("c0", cleanID, 5000, 5100)
	client("c1", excusedID, 6000, 6100)
	r.faults = []window{{at(5500), at(5600)}}
	k1 := &wchild{ws: &wsession{label: "k1[300ms]", lease: 300 * time.Millisecond, member: childID + "-1", killed: at(4000)}}
	r.members[k1.ws.member] = k1.ws
	k2 := &wchild{ws: &wsession{label: "k2[300ms]", lease: 300 * time.Millisecond, killed: at(4500)}, pid: 4242}
	r.kids = []*wchild{k1, k2}
	return r, srv
}

// plant runs each command on srv.
func plant(t *testing.T, srv *redistest.Server, cmds [][]string) {
	t.Helper()
	for _, cmd := range cmds {
		if err := srv.Do(t, cmd...).Error(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
}

// TestFinalScanFindsEveryLeftover: once every Client closed, every key
// under the prefix that is not a fence marker is reported, whatever its
// kind, but for what an excused session, Client or killed child left
// with a TTL.
func TestFinalScanFindsEveryLeftover(t *testing.T) {
	r, srv := leftoverRun(t, Workload{})
	now := time.Now().UnixMilli()
	past, ahead := itoa(now-60_000), itoa(now+60_000)
	clean, excused, child := cleanID+"-1", excusedID+"-1", childID+"-1"
	plant(t, srv, [][]string{
		// Fence markers.
		{"SET", "wl:{wl-7}", "~100", "PX", "3600000"},
		{"SET", "wl:{wl-probe-1}", "~5", "PX", "60000"},
		{"HSET", "wl:s:{wl-s2}", "#f", "1", "#l", "2"}, {"PEXPIRE", "wl:s:{wl-s2}", "7200000"},
		// Excused: what c1's session and the children left, with a TTL.
		{"SET", "wl:{wl-8}", excused + ":3", "PX", "5000"},
		{"SET", "wl:{wl-8}:c", excused + ":3", "PX", "5000"},
		{"RPUSH", "wl:{wl-9}:q", excused + "|" + ahead + "|1000", child + "|" + past + "|300"}, {"PEXPIRE", "wl:{wl-9}:q", "2000"},
		{"HSET", "wl:e:{wl-e1}", "#f", "1", "#l", "1", "#v:" + excused + ".e0", "v", "#p:" + excused + ".e0", "1",
			excused + ".e0", "1:" + ahead, "#v:" + child + ".e2", "w"}, {"PEXPIRE", "wl:e:{wl-e1}", "60000"},
		{"SET", "wl:i:" + excusedID, "host:1", "PX", "90000000"},
		{"SET", "wl:i:" + childID, "host:2", "PX", "90000000"},
		{"SET", "wl:i:" + strings.Repeat("d", 32), "host:4242", "PX", "90000000"},
		// Left.
		{"SET", "wl:{wl-1}", clean + ":77", "PX", "5000"},
		{"SET", "wl:{wl-2}", "~9"},
		{"SET", "wl:{wl-3}", "~9", "PX", "7200000"},
		{"SET", "wl:{wl-4}", "hello", "PX", "5000"},
		{"SET", "wl:{wl-5}", excused + ":1"},
		{"RPUSH", "wl:{wl-6}", "x"}, {"PEXPIRE", "wl:{wl-6}", "5000"},
		{"RPUSH", "wl:{wl-0}:q", clean + "|" + past + "|1000"}, {"PEXPIRE", "wl:{wl-0}:q", "5000"},
		{"SET", "wl:{wl-1}:c", clean + ":77", "PX", "5000"},
		{"SET", "wl:i:" + cleanID, "host:1", "PX", "90000000"},
		{"SET", "wl:i:" + strings.Repeat("e", 32), "host:9999", "PX", "90000000"},
		{"HSET", "wl:e:{wl-e0}", "#f", "5", "#l", "1", "#v:" + clean + ".e0", "v", "#p:" + clean + ".e0", "1",
			clean + ".e0", "5:" + past}, {"PEXPIRE", "wl:e:{wl-e0}", "60000"},
		{"HSET", "wl:s:{wl-s0}", "#f", "3", "#l", "2", "ghost.0", "3:" + ahead, "#x", "1"}, {"PEXPIRE", "wl:s:{wl-s0}", "60000"},
		{"RPUSH", "wl:s:{wl-s0}:q", clean + ".1|" + ahead + "|1000"}, {"PEXPIRE", "wl:s:{wl-s0}:q", "5000"},
		{"HSET", "wl:s:{wl-s1}", "#f", "1", "#l", "2"},
		{"SET", "wl:x", "y"},
	})
	r.finalScan(context.Background())
	msgs := strings.Join(r.fails[oClose], "\n")
	t.Logf("(f):\n%s", msgs)
	for key, want := range map[string]string{
		"wl:{wl-1}":       `(string, PTTL`,
		"wl:{wl-2}":       `no TTL: it never lapses; value "~9"`,
		"wl:{wl-3}":       `a fence marker kept longer than an hour`,
		"wl:{wl-4}":       `a lock key holding a value baton does not write`,
		"wl:{wl-5}":       `no TTL`,
		"wl:{wl-6}":       `a list where baton writes a string`,
		"wl:{wl-0}:q":     `a queue with entries of c0.s0 (dead)`,
		"wl:{wl-1}:c":     `a cache mark naming c0.s0`,
		"wl:i:" + cleanID: `the instance record of c0;`,
		"wl:i:eeee":       `the instance record of ?eeee`,
		"wl:e:{wl-e0}": `the election value #v:` + clean + `.e0 of c0.s0/e0, the holder ` + clean +
			`.e0 of c0.s0/e0 (deadline passed`,
		"wl:s:{wl-s0}":   `the field #x, which baton does not write, the holder ghost.0 of ?ghost.0 (deadline `,
		"wl:s:{wl-s0}:q": `a queue with entries of c0.s0/1 (live)`,
		"wl:s:{wl-s1}":   `no TTL: it never lapses; fields {#f="1" #l="2"}`,
		"wl:x":           `a key baton does not write; value "y"`,
	} {
		if !strings.Contains(msgs, "after every Client closed, "+key) {
			t.Errorf("%s not found", key)
		} else if !strings.Contains(msgs, want) {
			t.Errorf("%s: %q not said", key, want)
		}
	}
	if !strings.Contains(msgs, "the pending mark #p:"+clean+".e0 of c0.s0/e0") || !strings.Contains(msgs, "a lock key naming c0.s0; value") {
		t.Error("a pending mark or a lock key's owner not said")
	}
	for _, key := range []string{"wl:{wl-7}", "wl:{wl-probe-1}", "wl:s:{wl-s2}", "wl:{wl-8}", "wl:{wl-8}:c", "wl:{wl-9}:q",
		"wl:e:{wl-e1}", "wl:i:" + excusedID, "wl:i:" + childID, "wl:i:dddd"} {
		if strings.Contains(msgs, "after every Client closed, "+key) {
			t.Errorf("%s reported: a fence marker, or excused", key)
		}
	}
	if n := r.nfails[oClose]; n != 15 {
		t.Errorf("%d leftovers reported, want 15", n)
	}
	if got := fmtMap(r.swept); got != "{excused:7 fence markers:3 left:15}" {
		t.Errorf("keys by verdict %s, want 3 fence markers, 7 excused, 15 left", got)
	}
}

// TestClosedSessionLeavesNoMarks: after a Session.Close, a cache mark
// naming the session and an election value or pending mark of one of its
// campaign slots are reported; another session's are not.
func TestClosedSessionLeavesNoMarks(t *testing.T) {
	r, srv := leftoverRun(t, Workload{Names: 1, Elections: 1})
	clean, other := cleanID+"-1", excusedID+"-1"
	plant(t, srv, [][]string{
		{"SET", "wl:{wl-0}:c", clean + ":5", "PX", "5000"},
		{"HSET", "wl:e:{wl-e0}", "#f", "5", "#l", "1", "#v:" + clean + ".e3", "v", "#p:" + clean + ".e3", "1", "#v:" + other + ".e0", "w"},
	})
	ws := r.members[clean]
	closed := map[string]*wsession{clean: ws}
	after := time.Now()
	r.semClosed(closed, after)
	r.checkLeftovers(closed, map[*wsession]closeInfo{ws: {ws.closedBy, ws.closeStart, ws.closeEnd}}, after)
	msgs := strings.Join(r.fails[oClose], "\n")
	t.Logf("(f):\n%s", msgs)
	for _, want := range []string{
		`still has its cache mark wl:{wl-0}:c (value "` + clean + `:5"`,
		`still has the election value #v:` + clean + `.e3 of its slot`,
		`still has the pending mark #p:` + clean + `.e3 of its slot`,
	} {
		if !strings.Contains(msgs, want) {
			t.Errorf("not said: %s", want)
		}
	}
	if strings.Contains(msgs, other) || r.nfails[oClose] != 3 {
		t.Errorf("%d findings, want 3, none of %s", r.nfails[oClose], other)
	}
}
