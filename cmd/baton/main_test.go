package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// bin is the command, built once by TestMain (with -race when the tests
// run with it), so that the tests run what operators run.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-cmd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "baton")
	if err := build(bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, append(redistest.KnownLeaks(), goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))...)
}

func build(out string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(gobin, append(args, ".")...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, b)
	}
	return nil
}

// bound is the generous limit on anything a test waits for.
const bound = 10 * time.Second

type result struct {
	stdout, stderr string
	code           int
}

// runBaton runs the built command with args.
func runBaton(t testing.TB, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A -race binary sleeps 1 s at exit by default, for late reports.
	cmd.Env = append(cmd.Environ(), "GORACE=atexit_sleep_ms=50")
	start := time.Now()
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("baton %q: %v", args, err)
	}
	r := result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
	t.Logf("baton %s: exit %d after %v\n%s%s", strings.Join(args, " "), r.code, time.Since(start).Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

var nameSeq atomic.Int64

// uniqueName gives each test its own lock names.
func uniqueName(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), nameSeq.Add(1))
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newBaton(t testing.TB, opt rueidis.ClientOption, lease time.Duration) *baton.Client {
	t.Helper()
	c, err := baton.New(baton.Options{Redis: opt, LeaseTTL: lease})
	if err != nil {
		t.Fatalf("baton.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func lock(t testing.TB, c *baton.Client, name string) *baton.Lock {
	t.Helper()
	l, err := c.Lock(ctxTimeout(t, bound), name)
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return l
}

func unlock(t testing.TB, l *baton.Lock) {
	t.Helper()
	if err := l.Unlock(ctxTimeout(t, bound)); err != nil {
		t.Fatalf("Unlock(%q): %v", l.Name(), err)
	}
}

type lockResult struct {
	l   *baton.Lock
	err error
}

// lockAsync starts c.Lock(name) in a goroutine; cleanup cancels it and
// waits for it.
func lockAsync(t testing.TB, c *baton.Client, name string) <-chan lockResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	ch := make(chan lockResult, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		l, err := c.Lock(ctx, name)
		ch <- lockResult{l, err}
	}()
	t.Cleanup(func() { cancel(); <-finished })
	return ch
}

// await waits for Lock's result for at most d.
func await(t testing.TB, ch <-chan lockResult, d time.Duration, what string) *baton.Lock {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Lock: %v", what, r.err)
		}
		return r.l
	case <-time.After(d):
		t.Fatalf("%s: Lock still waiting after %v", what, d)
		return nil
	}
}

// waitQueued returns once want sessions are queued for name in Redis. It
// wakes on Redis's tracking invalidations of the queue key, not on a timer.
func waitQueued(t testing.TB, opt rueidis.ClientOption, name string, want int64) {
	t.Helper()
	changed := make(chan struct{}, 1)
	opt.DisableCache = false
	opt.OnInvalidations = func([]rueidis.RedisMessage) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	defer rc.Close()
	ctx := ctxTimeout(t, bound)
	q := "baton:{" + name + "}:q"
	for {
		n, err := rc.DoCache(ctx, rc.B().Llen().Key(q).Cache(), time.Minute).AsInt64()
		if err != nil {
			t.Fatalf("LLEN %s: %v", q, err)
		}
		if n >= want {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("%d sessions queued for %q after %v, want %d", n, name, bound, want)
		}
	}
}

// waitDone waits for l.Done() for at most d.
func waitDone(t testing.TB, l *baton.Lock, d time.Duration, what string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(d):
		t.Fatalf("%s: Done of %q still open after %v", what, l.Name(), d)
	}
}

// get returns the value of key, or "" when there is none.
func get(t testing.TB, rc rueidis.Client, key string) string {
	t.Helper()
	v, err := rc.Do(ctxTimeout(t, bound), rc.B().Get().Key(key).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

func newRueidis(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	opt.DisableCache = true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rc.Close)
	return rc
}

func lockKey(name string) string { return "baton:{" + name + "}" }

// lsRows parses ls's output: the fields of each line after the header, by
// name.
func lsRows(t testing.TB, out string) map[string][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "NAME STATE TOKEN LEASE QUEUE" {
		t.Fatalf("ls header %q", lines[0])
	}
	rows := map[string][]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("ls line %q: %d fields, want 5", line, len(f))
		}
		rows[f[0]] = f
	}
	return rows
}
