// Package faultproxy is a fault-injecting TCP proxy for tests.
//
// A Proxy sits between a client and a server (typically Redis) on real
// loopback sockets and can add latency, hold traffic (a network partition
// that looks like silence, not resets), cut connections, or refuse new ones.
// Real sockets matter: they exercise the client's actual timeout, reconnect
// and pipelining code, which an in-memory fake would bypass.
package faultproxy

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// dialTimeout bounds connecting to the target; on loopback a dial either
// succeeds or is refused almost instantly.
const dialTimeout = 5 * time.Second

// Proxy forwards TCP connections from its own loopback address to a target.
// Safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // the accept goroutine and every copy goroutine

	mu        sync.Mutex
	latency   time.Duration
	jitter    time.Duration
	blackhole bool
	resume    chan struct{} // closed when the blackhole is lifted
	refuse    bool
	closed    bool
	conns     map[*link]struct{}
}

// link is one proxied connection: the accepted client side and the dialed
// target side.
type link struct {
	client, server net.Conn
	done           chan struct{} // closed by shut; wakes delayed or held copies
	once           sync.Once
}

// New starts a proxy on 127.0.0.1:0 forwarding to target ("host:port").
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Start is New for tests: it fails t on error and closes the proxy at
// t's cleanup.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Addr returns the address clients should connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient errors (e.g. EMFILE): back off instead of spinning.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		// The target is dialed even while blackholed: the client cannot tell,
		// and the connection is ready when traffic is released.
		s, err := net.DialTimeout("tcp", p.target, dialTimeout)
		if err != nil {
			c.Close() // the client sees what it would see from a dead server
			continue
		}
		l := &link{client: c, server: s, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.shut()
			return
		}
		p.conns[l] = struct{}{}
		// Added under mu while !closed, so Close's Wait cannot miss them.
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(l, l.client, l.server)
		go p.pipe(l, l.server, l.client)
	}
}

// pipe copies chunks from src to dst, applying latency and blackhole. One
// goroutine per direction means a chunk is read only after the previous one
// was written: order is preserved, and a burst of chunks accumulates delay,
// which is fine for request/response traffic like Redis.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	defer p.wg.Done()
	defer p.drop(l) // either side failing ends both, like a broken path
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			// Hold first, so bytes released from a blackhole still get latency.
			if !p.hold(l) || !p.delay(l) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// delay sleeps for the configured latency; false means the link was shut.
func (p *Proxy) delay(l *link) bool {
	p.mu.Lock()
	d := p.latency
	if p.jitter > 0 {
		d += rand.N(p.jitter)
	}
	p.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// hold blocks while the proxy is blackholed; false means the link was shut.
func (p *Proxy) hold(l *link) bool {
	for {
		p.mu.Lock()
		on, resume := p.blackhole, p.resume
		p.mu.Unlock()
		if !on {
			return true
		}
		select {
		case <-resume:
		case <-l.done:
			return false
		}
	}
}

// shut closes both sides once; closing unblocks any Read/Write in progress.
func (l *link) shut() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
	})
}

// drop shuts l and forgets it.
func (p *Proxy) drop(l *link) {
	l.shut()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// SetLatency delays every chunk forwarded in either direction by d plus a
// random duration in [0, jitter). Order is preserved per direction.
func (p *Proxy) SetLatency(d, jitter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency, p.jitter = d, jitter
}

// Blackhole, when on, holds bytes in both directions (neither forwarded nor
// dropped) and leaves new connections accepted but silent, so peers see a
// partition rather than resets. Turning it off releases the held bytes.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && !p.blackhole:
		p.resume = make(chan struct{})
	case !on && p.blackhole:
		close(p.resume)
	}
	p.blackhole = on
}

// Cut closes every current connection on both sides. New connections are
// still accepted.
func (p *Proxy) Cut() {
	for _, l := range p.snapshot() {
		p.drop(l)
	}
}

// Refuse, when on, makes the proxy close new connections immediately after
// accepting them. Existing connections are untouched.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// Conns returns the current number of proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops accepting, closes every connection and waits for all of the
// proxy's goroutines to exit.
func (p *Proxy) Close() error {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	p.mu.Unlock()
	var err error
	if first {
		err = p.ln.Close()
	}
	// Every call waits, so a concurrent second Close also returns only once
	// the goroutines are gone.
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) snapshot() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
	}
	return ls
}
