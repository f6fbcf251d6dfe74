package baton

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// startHolder starts a child process (runChild) that takes name on srv
// with lease (as a lock; with what "2" a permit of a semaphore of 2,
// "elect" the leadership of that election) and returns once it holds it.
func startHolder(t *testing.T, srv *redistest.Server, name string, lease time.Duration, what string) *exec.Cmd {
	t.Helper()
	cmd, out := startChild(t, srv, name, lease, what)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q %v", line, err)
	}
	return cmd
}

// startChild starts a child process (runChild) that asks for name on srv
// with lease (see startHolder for what), killed at cleanup, and returns
// it with its stdout (it says "locked" once it holds the name).
func startChild(t *testing.T, srv *redistest.Server, name string, lease time.Duration, what string) (*exec.Cmd, io.Reader) {
	t.Helper()
	spec := srv.Addr() + " " + name + " " + lease.String()
	if what != "" {
		spec += " " + what
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+spec)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, out
}

// killAndWait kills the holder cmd once the waiter has queued (qb), and
// checks that the waiter's attempt (got) succeeds within lease + 1s.
func killAndWait(t *testing.T, cmd *exec.Cmd, lease time.Duration, qb <-chan string, got <-chan error) {
	t.Helper()
	waitFor(t, qb, 5*time.Second, "waiter to queue")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	cmd.Wait()
	if err := waitFor(t, got, 10*time.Second, "waiter"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
	t.Logf("waiter acquired %v after the holder was killed (lease %v)", took, lease)
	if took > lease+time.Second {
		t.Fatalf("waiter needed %v, more than lease %v + 1s", took, lease)
	}
}

// TestHolderCrash: a holder process is SIGKILLed while holding; a waiter
// gets the lock within the lease plus a small margin.
func TestHolderCrash(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	name := uniqueName(t)
	cmd := startHolder(t, srv, name, lease, "")
	b := newClient(t, srv, Options{})
	qb := onQueue(b)
	ctx := ctxTimeout(t, 10*time.Second)
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, name)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	killAndWait(t, cmd, lease, qb, got)
}

// TestSemaphoreHolderCrash: a process holding one of two permits is
// SIGKILLed while the other is held and a waiter is queued; the waiter gets
// the permit within the lease plus a small margin.
func TestSemaphoreHolderCrash(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	name := uniqueName(t)
	cmd := startHolder(t, srv, name, lease, "2")
	a := newClient(t, srv, Options{LeaseTTL: lease})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	ma, _ := a.Semaphore(name, 2)
	mine, err := ma.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Unlock(ctx)
	mb, _ := b.Semaphore(name, 2)
	qb := onQueue(b)
	got := make(chan error, 1)
	go func() {
		l, err := mb.Acquire(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	killAndWait(t, cmd, lease, qb, got)
}
