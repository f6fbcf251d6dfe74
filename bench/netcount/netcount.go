// Package netcount counts a client's socket writes per remote address: a
// rueidis DialCtxFn that wraps each connection.
//
// rueidis writes commands into a bufio.Writer of WriteBufferEachConn bytes
// (512 KiB by default) and flushes it when its queue of commands is empty:
// a pipelined batch is normally one Write. A batch larger than the buffer
// goes out as full-buffer spills (Writes of exactly the buffer size)
// followed by one final flush, all without waiting for a reply; so the
// round trips are the Writes that are not spills (and not keep-alive
// PINGs).
package netcount

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// pingCmd is the exact bytes rueidis writes for its keep-alive PING;
// helloCmd begins the handshake of a new connection.
var (
	pingCmd  = []byte("*1\r\n$4\r\nPING\r\n")
	helloCmd = []byte("\r\n$5\r\nHELLO\r\n")
)

// DefaultSpill is rueidis.DefaultWriteBuffer, the write buffer of each
// rueidis connection unless ClientOption.WriteBufferEachConn says otherwise.
const DefaultSpill = 1 << 19

// Event is one Write seen while recording.
type Event struct {
	At    time.Time
	Addr  string
	Bytes int
	Ping  bool   // the write was exactly one PING command (rueidis keep-alive)
	Spill bool   // the write was exactly the write buffer's size: part of a larger batch
	Hello bool   // the write begins with HELLO: a new connection's handshake
	Head  string // the first bytes, when Counter.KeepHead is set (debugging)
}

// RoundTrip reports a write that ends a pipelined batch: neither a
// keep-alive PING, a full-buffer spill nor a connection handshake.
func (e Event) RoundTrip() bool { return !e.Ping && !e.Spill && !e.Hello }

// Totals are the counts for one remote address.
type Totals struct {
	Conns  int64 `json:"conns"`
	Writes int64 `json:"writes"`
	Pings  int64 `json:"pings"`
	Bytes  int64 `json:"bytes"`
}

type node struct {
	conns, writes, pings, bytes atomic.Int64
}

// Counter counts writes of every connection it dialled.
type Counter struct {
	// KeepHead, set before use, keeps the first bytes of each recorded
	// write in Event.Head.
	KeepHead int
	spill    int
	mu       sync.Mutex
	nodes    map[string]*node
	rec      atomic.Bool
	events   []Event
}

// New returns an empty Counter for clients with rueidis's default write
// buffer.
func New() *Counter { return &Counter{nodes: map[string]*node{}, spill: DefaultSpill} }

// Dial has the signature of rueidis.ClientOption.DialCtxFn.
func (c *Counter) Dial(ctx context.Context, dst string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	var (
		conn net.Conn
		err  error
	)
	if cfg != nil {
		td := tls.Dialer{NetDialer: dialer, Config: cfg}
		conn, err = td.DialContext(ctx, "tcp", dst)
	} else {
		conn, err = dialer.DialContext(ctx, "tcp", dst)
	}
	if err != nil {
		return nil, err
	}
	n := c.node(dst)
	n.conns.Add(1)
	return &countingConn{Conn: conn, c: c, n: n, addr: dst}, nil
}

func (c *Counter) node(addr string) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[addr]
	if !ok {
		n = &node{}
		c.nodes[addr] = n
	}
	return n
}

// Totals returns the counts so far per remote address.
func (c *Counter) Totals() map[string]Totals {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]Totals, len(c.nodes))
	for a, n := range c.nodes {
		out[a] = Totals{Conns: n.conns.Load(), Writes: n.writes.Load(), Pings: n.pings.Load(), Bytes: n.bytes.Load()}
	}
	return out
}

// Record starts keeping every write as an Event (forgetting earlier ones).
func (c *Counter) Record() {
	c.mu.Lock()
	c.events = nil
	c.mu.Unlock()
	c.rec.Store(true)
}

// Stop stops recording and returns the events, in time order.
func (c *Counter) Stop() []Event {
	c.rec.Store(false)
	c.mu.Lock()
	ev := c.events
	c.events = nil
	c.mu.Unlock()
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].At.Before(ev[j].At) })
	return ev
}

type countingConn struct {
	net.Conn
	c    *Counter
	n    *node
	addr string
}

func (cc *countingConn) Write(b []byte) (int, error) {
	ping := bytes.Equal(b, pingCmd)
	cc.n.writes.Add(1)
	cc.n.bytes.Add(int64(len(b)))
	if ping {
		cc.n.pings.Add(1)
	}
	if cc.c.rec.Load() {
		e := Event{At: time.Now(), Addr: cc.addr, Bytes: len(b), Ping: ping, Spill: len(b) == cc.c.spill,
			Hello: bytes.HasPrefix(b, []byte("*")) && bytes.Contains(b[:min(len(b), 24)], helloCmd)}
		if k := cc.c.KeepHead; k > 0 {
			e.Head = string(b[:min(k, len(b))])
		}
		cc.c.mu.Lock()
		if cc.c.rec.Load() {
			cc.c.events = append(cc.c.events, e)
		}
		cc.c.mu.Unlock()
	}
	return cc.Conn.Write(b)
}

// Ticks groups events (PINGs excluded) into bursts: a new burst begins
// after a pause longer than gap. It returns, per burst, the round trips
// (Event.RoundTrip) per address.
func Ticks(ev []Event, gap time.Duration) []map[string]int {
	var out []map[string]int
	var last time.Time
	for _, e := range ev {
		if e.Ping || e.Hello {
			continue
		}
		if len(out) == 0 || e.At.Sub(last) > gap {
			out = append(out, map[string]int{})
		}
		if e.RoundTrip() {
			out[len(out)-1][e.Addr]++
		}
		last = e.At
	}
	return out
}
