package checker

// Child processes of a workload run (Workload.Child): now and then a
// process of its own (RunChild, child.go) takes a random name (a lock, a
// permit or a leadership) with a lease of Workload.ChildLeases and is
// SIGKILLed while it waits or holds, as a crashed process would stop.
// Until a child has been killed while waiting, a child that takes a lock
// or a leadership holds it until another child waits on it (at most 1 s),
// and the next child tries that name: children start slowly (a process
// of the test binary), and left to chance all of a short run's children
// may find their names free. Each child is a session of the run, "k<i>[<lease>]", whose call and
// hold are recorded as the workers' are, on the parent's clock (a child
// reports its wall clock, which the two processes share). The oracles
// read them so:
//
//   - a child's hold ends when it is killed (b); its key may stay until
//     its lease has run out from then (d);
//   - a child killed while waiting may be granted the name after its
//     death (its queue entry lapses within a lease of its last refresh)
//     and keep it for a lease from the grant: (d) reads the name as
//     taken by it for two leases of the child after the kill;
//   - a child's wait is judged by (d) until the kill and by (e) if it
//     acquired; its acquisitions count as turns of its session (e);
//   - what a child leaves in Redis lapses with its lease (its instance
//     record in a day): (f) excuses it;
//   - (k) takes a child's leadership as returned if the child wrote that
//     it held it, or if a reader saw it first before the kill plus
//     WaitBound (granted before the death, the child killed before it
//     wrote so).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// killedKind is the kind of a child's call ended by its kill.
const killedKind = "killed"

// maxChildren bounds the children alive at once (each is a process of
// the test binary, which is heavy under -race).
const maxChildren = 3

// wchild is one child process.
type wchild struct {
	ws   *wsession
	name int
	call *wcall
	pid  int // its process id, once started
}

// children starts a child at random intervals of mean ChildEvery until
// the run stops, and waits until every child it started has been killed
// and reaped.
func (r *wrun) children(rng *rand.Rand) {
	var wg sync.WaitGroup
	var alive atomic.Int32
	r.every(r.cfg.ChildEvery, rng, func(rng *rand.Rand) {
		if alive.Load() >= maxChildren {
			return
		}
		alive.Add(1)
		seed := rng.Uint64()
		wg.Go(func() {
			defer alive.Add(-1)
			r.runChild(rand.New(rand.NewPCG(r.cfg.Seed, seed)))
		})
	})
	wg.Wait()
}

// fromWall maps a child's wall clock (Unix ns) onto this process's clock.
func (r *wrun) fromWall(ns int64) time.Time { return r.t0.Add(time.Duration(ns - r.t0.UnixNano())) }

// runChild starts one child on a random name, records what it says, and
// kills it: a while after it said it waits or holds, at the latest 3 s
// after it started, or when the run stops.
func (r *wrun) runChild(rng *rand.Rand) {
	k := &wchild{name: rng.IntN(len(r.names))}
	lease := r.cfg.ChildLeases[rng.IntN(len(r.cfg.ChildLeases))]
	r.mu.Lock()
	if r.steer != nil {
		k.name = r.steer.name
	}
	r.nkids++
	k.ws = &wsession{label: fmt.Sprintf("k%d[%v]", r.nkids, lease), lease: lease}
	r.mu.Unlock()
	task := childTask{Addrs: r.cfg.Redis().InitAddress, Prefix: r.cfg.KeyPrefix, Client: r.cfg.KeyPrefix + "-" + k.ws.label,
		Lease: lease, Name: r.names[k.name]}
	switch {
	case r.elect[k.name]:
		task.Value = k.ws.label + "#v"
	case r.limits[k.name] > 0:
		task.Limit = r.limits[k.name]
	}
	spec, _ := json.Marshal(task)
	cmd := r.cfg.Child()
	cmd.Env = append(cmd.Environ(), ChildEnv+"="+string(spec))
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		r.failf(oErr, "starting child %s: %v", k.ws.label, err)
		return
	}
	k.pid = cmd.Process.Pid // read by instanceOwner once k is in r.kids
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	r.childLife(k, lines, rng)
	cmd.Process.Kill()
	killed := time.Now()
	for s := range lines { // what it wrote before it died
		r.childSaid(k, s)
	}
	cmd.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	k.ws.killed = killed
	if c := k.call; c != nil && c.end.IsZero() {
		c.end, c.kind = killed, killedKind
		r.kidWaits++
	}
	if r.steer == k {
		r.steer = nil
	}
	r.kids = append(r.kids, k)
}

// childLife follows what child k says until it is time to kill it.
func (r *wrun) childLife(k *wchild, lines <-chan string, rng *rand.Rand) {
	t := time.NewTimer(3 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			return
		case s, ok := <-lines:
			if !ok {
				r.failf(oErr, "child %s ended by itself", k.ws.label)
				return
			}
			switch r.childSaid(k, s) {
			case "waiting": // queued: killed there, mostly
				t.Reset(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
			case "held":
				d := time.Duration(rng.Int64N(int64(2*r.cfg.MaxHold) + 1))
				if r.steerTo(k) {
					d = time.Second
				}
				t.Reset(d)
			}
		}
	}
}

// steerTo makes child k, which holds its name, the one the next child
// tries, if no child has been killed while waiting yet and none is
// steered to already; a semaphore's permit is left alone (its next child
// may take another permit instead of waiting).
func (r *wrun) steerTo(k *wchild) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kidWaits > 0 || r.steer != nil || r.limits[k.name] > 0 {
		return false
	}
	r.steer = k
	return true
}

// childSaid records a line of child k and returns what it said.
func (r *wrun) childSaid(k *wchild, s string) string {
	l, err := parseChildLine(s)
	if err != nil {
		r.failf(oErr, "child %s: %v", k.ws.label, err)
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch l.what {
	case "session":
		k.ws.member = l.id
		r.members[l.id] = k.ws
	case "start":
		op := opLock
		switch {
		case r.elect[k.name]:
			op = opCampaign
		case r.limits[k.name] > 0:
			op = opAcquire
		}
		k.call = &wcall{op: op, sess: k.ws, name: k.name, start: r.fromWall(l.at)}
		if r.elect[k.name] {
			k.call.value = k.ws.label + "#v"
		}
		r.calls = append(r.calls, k.call)
	case "held":
		if k.call == nil {
			return l.what
		}
		at := r.fromWall(l.at)
		k.call.end = at
		h := &whold{call: k.call, sess: k.ws, name: k.name, token: l.token, acquired: at}
		k.call.hold = h
		r.holds = append(r.holds, h)
		k.ws.holds = append(k.ws.holds, h)
	}
	return l.what
}

// deadWaitersLocked returns, for name, a span for every child killed
// while waiting on it: from the kill for two of its leases. r.mu is held.
func (r *wrun) deadWaitersLocked(name int) []span {
	var out []span
	for _, k := range r.kids {
		if k.name == name && k.call != nil && k.call.kind == killedKind {
			out = append(out, span{from: k.ws.killed, to: k.ws.killed.Add(2 * k.ws.lease)})
		}
	}
	return out
}

// childrenStatsLocked fills the report's counts of children. r.mu is held.
func (r *wrun) childrenStatsLocked(rep *WorkloadReport) {
	rep.Children = len(r.kids)
	for _, k := range r.kids {
		switch {
		case k.call == nil:
		case k.call.kind == killedKind:
			rep.ChildKilledWaiting++
		case k.call.hold != nil:
			rep.ChildHolds++
		}
	}
}
