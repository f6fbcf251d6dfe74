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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktest"
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

type result struct {
	stdout, stderr string
	code           int
}

// runBaton runs the built command with args.
func runBaton(t testing.TB, args ...string) result {
	t.Helper()
	return runBatonEnv(t, nil, args...)
}

// runBatonEnv runs the built command with args and env ("KEY=value")
// added to the test's environment, less any REDISCLI_AUTH of its own.
func runBatonEnv(t testing.TB, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*locktest.Bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = slices.DeleteFunc(cmd.Environ(), func(kv string) bool { return strings.HasPrefix(kv, authEnv+"=") })
	// A -race binary sleeps 1 s at exit by default, for late reports.
	cmd.Env = append(append(cmd.Env, "GORACE=atexit_sleep_ms=50"), env...)
	start := time.Now()
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("baton %q: %v", args, err)
	}
	r := result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
	t.Logf("%sbaton %s: exit %d after %v\n%s%s", strings.Join(append(env, ""), " "), strings.Join(args, " "), r.code, time.Since(start).Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

// get returns the value of key, or "" when there is none.
func get(t testing.TB, rc rueidis.Client, key string) string {
	t.Helper()
	v, err := rc.Do(locktest.CtxTimeout(t, locktest.Bound), rc.B().Get().Key(key).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

func lockKey(name string) string { return "baton:{" + name + "}" }

// lsRows parses ls's output: the fields of each lock's line after the
// kind, by name.
func lsRows(t testing.TB, out string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	for k, f := range lsAll(t, out) {
		if k.kind == "lock" {
			rows[k.name] = f
		}
	}
	return rows
}

// kindName is a name of one kind, as ls prints it.
type kindName struct{ kind, name string }

// lsAll parses ls's output: the fields of each line after the header and
// the kind, by kind and name.
func lsAll(t testing.TB, out string) map[kindName][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "KIND NAME STATE TOKEN LEASE QUEUE HOLDERS INSTANCE" {
		t.Fatalf("ls header %q", lines[0])
	}
	rows := map[kindName][]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 8 {
			t.Fatalf("ls line %q: %d fields, want 8", line, len(f))
		}
		rows[kindName{f[0], f[1]}] = f[1:]
	}
	return rows
}
