package batontest

import (
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/batonlock/baton"
)

// Server is an in-process Redis (miniredis) for one test. Its clock stands
// still: keys expire, and leases end, only when the test calls
// FastForward. Server is safe for concurrent use; the zero value is not
// usable, and a Server must not be copied. Create it with NewServer.
type Server struct {
	m *miniredis.Miniredis

	// scripts is held for reading by every Lua script while it runs and
	// for writing by FastForward, so that no script runs between the
	// clock's move and the end of what it ended (see clock.go).
	scripts sync.RWMutex
	inside  sync.Map // *server.Peer -> struct{}: its script is being run by gateScripts

	mu  sync.Mutex   // protects now and dbs
	now time.Time    // the server's clock, as last set on m
	dbs map[int]bool // the databases of the clients made by Client
}

// NewServer starts an in-process Redis on a free 127.0.0.1 port and
// stops it when the test ends (tb.Cleanup), after the clients that
// Client made for the same test are closed.
//
// The server's clock starts at the current time and moves only with
// FastForward: TTLs do not run down, and TIME (which baton's scripts read
// for fencing tokens and for the deadlines of semaphore permits and queue
// entries) does not advance, while the test runs. A holder that stops
// renewing, or crashed, thus keeps its lock until the test fast-forwards
// past its lease.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{m: miniredis.NewMiniRedis(), now: time.Now(), dbs: map[int]bool{0: true}}
	s.m.SetTime(s.now)
	s.m.ClockTTL(true) // TTLs follow the clock, which only FastForward moves
	if err := s.m.Start(); err != nil {
		tb.Fatalf("batontest: start miniredis: %v", err)
	}
	tb.Cleanup(s.m.Close)
	s.m.Server().SetPreHook(s.gateScripts)
	return s
}

// Addr returns the server's address ("127.0.0.1:<port>"), for clients
// other than baton's, such as a rueidis client that inspects keys.
func (s *Server) Addr() string { return s.m.Addr() }

// Client returns a baton Client on the server, closed when the test ends
// (tb.Cleanup); an error from that Close fails the test. opts is used as
// given, except in opts.Redis: InitAddress becomes the server's address,
// and ForceSingleClient, AlwaysRESP2 and DisableCache are set, as
// miniredis needs (see the package documentation). The other fields of
// opts.Redis, such as DialCtxFn, are kept. Client fails the test when
// baton.New fails.
func (s *Server) Client(tb testing.TB, opts baton.Options) *baton.Client {
	tb.Helper()
	opts.Redis.InitAddress = []string{s.Addr()}
	opts.Redis.ForceSingleClient = true
	opts.Redis.AlwaysRESP2 = true
	opts.Redis.DisableCache = true
	s.mu.Lock()
	s.dbs[opts.Redis.SelectDB] = true
	s.mu.Unlock()
	c, err := baton.New(opts)
	if err != nil {
		tb.Fatalf("batontest: baton.New: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("batontest: Client.Close: %v", err)
		}
	})
	return c
}
