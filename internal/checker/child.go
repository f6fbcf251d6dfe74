package checker

// The child side of Workload.Child: a process of its own that takes one
// name and is SIGKILLed while it waits or holds (the parent side is in
// workload_children.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
)

// ChildEnv is the environment variable that carries a child's task; a
// test binary whose environment has it should call RunChild.
const ChildEnv = "BATON_CHECKER_CHILD"

// childTask is what one child does.
type childTask struct {
	Addrs  []string      // Redis
	Prefix string        // baton's KeyPrefix
	Client string        // the connections' client name (oracle (l))
	Lease  time.Duration // LeaseTTL
	Name   string
	Limit  int    // a semaphore's limit; 0: a lock or an election
	Value  string // an election's campaign value; "": not an election
}

// IsChild reports whether this process is a workload's child (ChildEnv
// is set).
func IsChild() bool { return os.Getenv(ChildEnv) != "" }

// RunChild does the task ChildEnv describes: it makes a baton Client,
// writes "session <id>" on stdout, then "start <ns>", calls Lock, Acquire
// or Campaign, writes "waiting <ns>" when the call goes to sleep and
// "held <token> <ns>" when it returns (ns: the wall clock in Unix
// nanoseconds, which the parent maps onto its own clock), and waits to be
// killed. It returns only on an error.
func RunChild() error {
	var task childTask
	if err := json.Unmarshal([]byte(os.Getenv(ChildEnv)), &task); err != nil {
		return fmt.Errorf("checker: child task: %w", err)
	}
	var mu sync.Mutex // one line at a time
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	c, err := baton.New(baton.Options{
		Redis:     rueidis.ClientOption{InitAddress: task.Addrs, ClientName: task.Client},
		KeyPrefix: task.Prefix,
		LeaseTTL:  task.Lease,
		Observer: baton.ObserverFunc(func(_ context.Context, ev baton.Event) {
			if ev.Kind == baton.Waiting {
				say("waiting %d", time.Now().UnixNano())
			}
		}),
	})
	if err != nil {
		return fmt.Errorf("checker: child: %w", err)
	}
	say("session %s", c.Session().ID())
	l, err := childAcquire(c, task, func() { say("start %d", time.Now().UnixNano()) })
	if err != nil {
		return fmt.Errorf("checker: child: %w", err)
	}
	say("held %d %d", l.Token(), time.Now().UnixNano())
	select {} // until killed
}

// childAcquire makes the child's call; start is called as it begins.
func childAcquire(c *baton.Client, task childTask, start func()) (*baton.Lock, error) {
	ctx := context.Background()
	switch {
	case task.Value != "":
		e, err := c.Election(task.Name)
		if err != nil {
			return nil, err
		}
		start()
		return e.Campaign(ctx, task.Value)
	case task.Limit > 0:
		m, err := c.Semaphore(task.Name, task.Limit)
		if err != nil {
			return nil, err
		}
		start()
		return m.Acquire(ctx)
	}
	start()
	return c.Lock(ctx, task.Name)
}

// childLine is one line a child wrote, read by the parent.
type childLine struct {
	what  string // "session", "start", "waiting", "held"
	id    string // session: the member
	token uint64 // held
	at    int64  // start, waiting, held: the child's wall clock, Unix ns
}

// parseChildLine reads a line of RunChild's.
func parseChildLine(s string) (childLine, error) {
	f := strings.Fields(s)
	var l childLine
	var err error
	switch {
	case len(f) == 2 && f[0] == "session":
		l.id = f[1]
	case len(f) == 2 && (f[0] == "start" || f[0] == "waiting"):
		_, err = fmt.Sscan(f[1], &l.at)
	case len(f) == 3 && f[0] == "held":
		if _, err = fmt.Sscan(f[1], &l.token); err == nil {
			_, err = fmt.Sscan(f[2], &l.at)
		}
	default:
		return l, errors.New("checker: child wrote " + fmt.Sprintf("%q", s))
	}
	if len(f) > 0 {
		l.what = f[0]
	}
	return l, err
}
