package simredis

import (
	"sort"
	"time"
	"unsafe"
)

// ClientID names a connection to the Server. Outside (0) is an anonymous
// connection that subscribes to nothing and tracks nothing.
type ClientID int64

// Outside is the connection of operations from outside baton (DEL,
// FLUSHALL, SET by an operator or another program).
const Outside ClientID = 0

// Server is a simulated Redis: a keyspace, a clock and connections. Not
// safe for concurrent use; not to be copied; make one with New.
type Server struct {
	opt     Options
	us      int64             // the clock: µs since the Unix epoch
	keys    map[string]*value // the keyspace; a key past its expiry is gone though still here
	tracked map[string][]*conn
	conns   map[ClientID]*conn
	order   []*conn            // connections in the order they connected (FLUSHALL tells them in it)
	subs    map[string][]*conn // classic channels' subscribers, in subscription order
	ssubs   map[string][]*conn // shard channels' subscribers
	out     []Delivery

	fields  []field  // scratch: a hash's fields as HGETALL returned them
	strs    []string // scratch: semscan's members with an election value
	expired []string // scratch: SetTime's tracked keys past their expiry
	chbuf   []byte   // scratch: a client channel's name
	spare   []*value // values of deleted keys, whose storage a new key takes
	r       run      // the call running (Eval)
	derived map[[2]string]string
}

// conn is a connection. A dropped one stays referenced by the tracking
// table until the key changes, as in Redis; gone makes it skipped.
type conn struct {
	id       ClientID
	tracking bool // CLIENT TRACKING ON OPTIN NOLOOP
	gone     bool
	subs     []string // classic channels
	ssubs    []string // shard channels
}

// DeliveryKind says what a Delivery is.
type DeliveryKind uint8

// The kinds of Delivery.
const (
	Message      DeliveryKind = iota + 1 // a PUBLISH to a channel the connection subscribes to
	ShardMessage                         // an SPUBLISH to a shard channel it subscribes to (SSUBSCRIBE)
	Invalidate                           // a tracked key changed, expired or was deleted; Key "" (and Flush) for FLUSHALL
)

// A Delivery is a push Redis sends one connection.
type Delivery struct {
	To      ClientID
	Kind    DeliveryKind
	Channel string // Message, ShardMessage
	Payload string // Message, ShardMessage
	Key     string // Invalidate: the key
	Flush   bool   // Invalidate: a FLUSHALL (Redis sends a null instead of a key)
}

// Options says which Redis the Server is.
type Options struct {
	// TrackCommandKeys makes a tracked script call track the keys its
	// read-only commands name, as Redis documents client-side caching.
	// Default (false): Redis 7.0's behaviour, measured by TestTwin on
	// redis-server 7.0.15: every read-only command a tracked call runs
	// tracks every key the call declared (its KEYS), whichever key the
	// command reads, and no other key.
	TrackCommandKeys bool
}

// New returns an empty Server whose clock is at the Unix epoch.
func New(opt Options) *Server {
	return &Server{
		opt:     opt,
		keys:    make(map[string]*value),
		tracked: make(map[string][]*conn),
		conns:   make(map[ClientID]*conn),
		subs:    make(map[string][]*conn),
		ssubs:   make(map[string][]*conn),
		derived: make(map[[2]string]string),
	}
}

// SetTime sets the clock (µs are kept). Keys that a connection tracks and
// that are past their expiry then are deleted and the trackers told, in
// key order, as Redis's active expiry would.
func (s *Server) SetTime(t time.Time) { s.SetMicros(t.UnixMicro()) }

// SetMicros is SetTime in µs since the Unix epoch.
func (s *Server) SetMicros(us int64) {
	s.us = us
	if len(s.tracked) == 0 {
		return
	}
	ms := s.ms()
	exp := s.expired[:0]
	for k := range s.tracked {
		if v := s.keys[k]; v != nil && v.expireAt != 0 && ms > v.expireAt {
			exp = append(exp, k)
		}
	}
	sort.Strings(exp)
	for _, k := range exp {
		s.remove(k, s.keys[k])
		s.modified(k, nil)
	}
	s.expired = exp[:0]
}

// Time returns the clock.
func (s *Server) Time() time.Time { return time.UnixMicro(s.us) }

func (s *Server) ms() int64 { return floorDiv(s.us, 1000) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Connect opens connection id (replacing one of that id, which is
// dropped), with tracking: as CLIENT TRACKING ON OPTIN NOLOOP (RESP3).
func (s *Server) Connect(id ClientID, tracking bool) {
	if id == Outside {
		panic("simredis: Connect(Outside)")
	}
	s.Drop(id)
	c := &conn{id: id, tracking: tracking}
	s.conns[id] = c
	s.order = append(s.order, c)
}

// Drop closes connection id: its subscriptions and tracking end. Dropping
// an unknown connection does nothing.
func (s *Server) Drop(id ClientID) {
	c := s.conns[id]
	if c == nil {
		return
	}
	c.gone = true
	delete(s.conns, id)
	for _, ch := range c.subs {
		s.subs[ch] = without(s.subs[ch], c)
		if len(s.subs[ch]) == 0 {
			delete(s.subs, ch)
		}
	}
	for _, ch := range c.ssubs {
		s.ssubs[ch] = without(s.ssubs[ch], c)
		if len(s.ssubs[ch]) == 0 {
			delete(s.ssubs, ch)
		}
	}
	s.order = without(s.order, c)
}

// Connected reports whether connection id is open.
func (s *Server) Connected(id ClientID) bool { return s.conns[id] != nil }

func without(cs []*conn, c *conn) []*conn {
	for i, x := range cs {
		if x == c {
			return append(cs[:i:i], cs[i+1:]...)
		}
	}
	return cs
}

// Subscribe subscribes connection id to channel (SUBSCRIBE), once.
func (s *Server) Subscribe(id ClientID, channel string) { s.subscribe(id, channel, s.subs, false) }

// SSubscribe subscribes connection id to shard channel (SSUBSCRIBE), once.
func (s *Server) SSubscribe(id ClientID, channel string) { s.subscribe(id, channel, s.ssubs, true) }

func (s *Server) subscribe(id ClientID, channel string, m map[string][]*conn, shard bool) {
	c := s.conns[id]
	if c == nil {
		panic("simredis: subscribe on a connection not connected")
	}
	for _, x := range m[channel] {
		if x == c {
			return
		}
	}
	m[channel] = append(m[channel], c)
	if shard {
		c.ssubs = append(c.ssubs, channel)
	} else {
		c.subs = append(c.subs, channel)
	}
}

// Unsubscribe ends connection id's subscription to channel (classic or shard).
func (s *Server) Unsubscribe(id ClientID, channel string) {
	c := s.conns[id]
	if c == nil {
		return
	}
	for _, m := range []map[string][]*conn{s.subs, s.ssubs} {
		if l := without(m[channel], c); len(l) == 0 {
			delete(m, channel)
		} else {
			m[channel] = l
		}
	}
	c.subs = removeString(c.subs, channel)
	c.ssubs = removeString(c.ssubs, channel)
}

func removeString(l []string, x string) []string {
	for i, y := range l {
		if y == x {
			return append(l[:i:i], l[i+1:]...)
		}
	}
	return l
}

// publish delivers msg to channel's subscribers and returns their number.
func (s *Server) publish(channel, msg string, shard bool) int64 {
	m, kind := s.subs, Message
	if shard {
		m, kind = s.ssubs, ShardMessage
	}
	cs := m[channel]
	for _, c := range cs {
		s.out = append(s.out, Delivery{To: c.id, Kind: kind, Channel: channel, Payload: msg})
	}
	return int64(len(cs))
}

// publishParts is publish of the message that is parts joined, made only
// when channel has subscribers.
func (s *Server) publishParts(channel string, shard bool, parts ...string) int64 {
	m := s.subs
	if shard {
		m = s.ssubs
	}
	if len(m[channel]) == 0 {
		return 0
	}
	return s.publish(channel, concat(parts), shard)
}

// publishClient is PUBLISH on a client's channel "<pre>:c:<client>" of
// the message that is parts joined: the channel's name and the message
// are made only when it has subscribers.
func (s *Server) publishClient(pre, client string, parts ...string) int64 {
	s.chbuf = append(append(append(s.chbuf[:0], pre...), ":c:"...), client...)
	if len(s.subs[string(s.chbuf)]) == 0 {
		return 0
	}
	return s.publish(string(s.chbuf), concat(parts), false)
}

// concat joins parts in one allocation.
func concat(parts []string) string {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = append(b, p...)
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// modified is Redis's signalModifiedKey for tracking: every connection that
// tracks key is told, but by itself (NOLOOP), and the key is tracked by
// nobody after.
func (s *Server) modified(key string, by *conn) {
	if len(s.tracked) == 0 {
		return
	}
	ts, ok := s.tracked[key]
	if !ok {
		return
	}
	for _, c := range ts {
		if !c.gone && c.tracking && c != by {
			s.out = append(s.out, Delivery{To: c.id, Kind: Invalidate, Key: key})
		}
	}
	delete(s.tracked, key)
}

// track makes c track key (a read-only command named it in a tracked call).
// A key past its expiry is gone first, untold (see run.lookup): SetMicros
// tells only of keys tracked when they expire.
func (s *Server) track(key string, c *conn) {
	if v := s.keys[key]; v != nil && v.expireAt != 0 && s.ms() > v.expireAt {
		s.remove(key, v)
	}
	ts := s.tracked[key]
	for _, x := range ts {
		if x == c {
			return
		}
	}
	s.tracked[key] = append(ts, c)
}

// Drain appends the deliveries queued since the last Drain to buf, in the
// order Redis would send them, empties the outbox and returns buf.
func (s *Server) Drain(buf []Delivery) []Delivery {
	buf = append(buf, s.out...)
	clear(s.out)
	s.out = s.out[:0]
	return buf
}

// key is k+suffix ("<lock>:c", "<lock>:q"), made once per key: the scripts
// derive these keys on every call.
func (s *Server) key(k, suffix string) string {
	d, ok := s.derived[[2]string{k, suffix}]
	if !ok {
		if len(s.derived) >= 1<<16 {
			clear(s.derived)
		}
		d = k + suffix
		s.derived[[2]string{k, suffix}] = d
	}
	return d
}
