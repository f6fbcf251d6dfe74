package baton

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// What errors and logs say: every error names the address or the name
// concerned and what to check, once prefixed "baton: ", in the words of
// the primitive; a script refused by an ACL names the command; a clean
// Close logs nothing; tokens are logged as strings.

// serveTCP starts a TCP listener on a free loopback port that handles each
// connection with serve, closed at the test's end.
func serveTCP(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	})
	return ln.Addr().String()
}

func TestNewErrorsNameAddress(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	silent := serveTCP(t, func(c net.Conn) { <-done })
	http := serveTCP(t, func(c net.Conn) {
		c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
		<-done
	})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name, addr, want string
	}{
		{"unresponsive", silent, "no answer within 300ms"},
		{"not Redis", http, "does not speak Redis's protocol"},
		{"nothing there", closed, "nothing listens there"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := rueidis.ClientOption{InitAddress: []string{tc.addr}}
			ro.Dialer.Timeout = 300 * time.Millisecond
			c, err := New(Options{Redis: ro})
			if err == nil {
				c.Close()
				t.Fatal("New succeeded")
			}
			for _, want := range []string{"baton: connect to Redis at " + tc.addr, tc.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New: %v\nwant it to say %q", err, want)
				}
			}
		})
	}
}

// TestErrorsSayWhat: errors name the call in the primitive's words, and
// "baton: " once.
func TestErrorsSayWhat(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	m, _ := c.Semaphore(name, 2)
	e, _ := c.Election(name)
	srv.Do(t, "SET", newKeys(DefaultKeyPrefix, name).Lock, "foreign")
	_, tryErr := c.TryLock(ctx, name)
	_, permErr := m.Acquire(done)
	_, tryPermErr := m.TryAcquire(done)
	_, campErr := e.Campaign(done, "v")
	for _, tc := range []struct {
		err  error
		want string
		is   error
	}{
		{tryErr, `baton: trylock "` + name + `": key holds a value not written by baton`, ErrForeignValue},
		{permErr, `baton: acquire a permit of semaphore "` + name + `": context canceled`, context.Canceled},
		{tryPermErr, `baton: try a permit of semaphore "` + name + `": context canceled`, context.Canceled},
		{campErr, `baton: campaign in election "` + name + `": context canceled`, context.Canceled},
	} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want) || !errors.Is(tc.err, tc.is) {
			t.Errorf("got %v, want %q... matching %v", tc.err, tc.want, tc.is)
		}
		if tc.err != nil && strings.Contains(tc.err.Error(), ": baton: ") {
			t.Errorf("%q repeats the prefix", tc.err)
		}
	}
}

// TestScriptDeniedNamesCommand: an ACL user without a command a script
// needs gets an error that names the command and points at the ACL line,
// and still reaches Redis's error with errors.As.
func TestScriptDeniedNamesCommand(t *testing.T) {
	srv := redistest.Start(t)
	ro := aclUser(t, srv, "nohgetall", "~*", "&*", "+@all", "-hgetall")
	c := newUserClient(t, srv, ro, Options{})
	m, _ := c.Semaphore(uniqueName(t), 1)
	_, err := m.TryAcquire(ctxTimeout(t, 5*time.Second))
	var re *rueidis.RedisError
	if err == nil || !strings.Contains(err.Error(), "HGETALL") || !strings.Contains(err.Error(), "ACL") || !errors.As(err, &re) {
		t.Fatalf("TryAcquire without HGETALL: %v; want it to name HGETALL and the ACL line, and wrap the Redis error", err)
	}
}

// TestQuietClose: a clean Close logs nothing, even at DEBUG; a loss's
// token is logged as a string (tokens exceed 2^53, which JSON readers
// round).
func TestQuietClose(t *testing.T) {
	srv := redistest.Start(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewJSONHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := New(Options{Redis: srv.Option(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "DEL", newKeys(DefaultKeyPrefix, name).Lock)
	waitFor(t, l.Done(), 5*time.Second, "the loss")
	if _, err := c.Lock(ctx, name+"-held"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	lost := buf.String()
	buf.Reset()
	mu.Unlock()
	var line struct{ Token any }
	if err := json.Unmarshal([]byte(strings.SplitN(lost, "\n", 2)[0]), &line); err != nil || line.Token != strconv.FormatUint(l.Token(), 10) {
		t.Errorf("loss logged as %s: want the token %d as a string", lost, l.Token())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if buf.Len() != 0 {
		t.Fatalf("a clean Close logged:\n%s", buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
