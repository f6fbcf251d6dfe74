package simredis

// The commands the scripts call (redis.call), on the keyspace, as Redis
// 7 runs them: the same type checks and errors, empty lists and hashes
// deleted, a change signalled to the connections that track the key, a key
// named by a read-only command tracked for the caller of a tracked call.

type kind uint8

const (
	kindString kind = iota + 1
	kindList
	kindHash
)

func (k kind) String() string {
	switch k {
	case kindString:
		return "string"
	case kindList:
		return "list"
	case kindHash:
		return "hash"
	}
	return "none"
}

// value is a key's value: one of str, list (head first) or hash (fields in
// the order written, as a small hash's listpack keeps them), and its
// expiry in ms since the Unix epoch (0: none).
type value struct {
	kind     kind
	str      string
	list     []string
	hash     []field
	expireAt int64
}

type field struct{ name, val string }

func (v *value) fieldAt(name string) int {
	for i := range v.hash {
		if v.hash[i].name == name {
			return i
		}
	}
	return -1
}

// Errors Redis replies with.
const (
	errWrongType    Error = "WRONGTYPE Operation against a key holding the wrong kind of value"
	errNotInteger   Error = "ERR value is not an integer or out of range"
	errNoSuchKey    Error = "ERR no such key"
	errOutOfRange   Error = "ERR index out of range"
	errExpireSET    Error = "ERR invalid expire time in 'set' command"
	errSyntax       Error = "ERR syntax error"
	errUnknownCmd   Error = "ERR unknown command"
	errWrongArgs    Error = "ERR wrong number of arguments"
	errCachingNoOpt Error = "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"
)

// run is one command or script call: the server, the calling connection
// (nil: Outside), and whether Redis tracks the keys its reads name.
type run struct {
	s     *Server
	c     *conn
	track bool
	keys  []string // the keys the call declared (KEYS)
}

// lookup returns key's value, nil when missing or past its expiry (then
// deleted). The deletion tells nobody: SetMicros expired, and told the
// trackers of, every key tracked when the clock passed its expiry, so a
// connection that tracks this one began after it was gone.
func (r *run) lookup(key string) *value {
	v := r.s.keys[key]
	if v != nil && v.expireAt != 0 && r.s.ms() > v.expireAt {
		r.s.remove(key, v)
		return nil
	}
	return v
}

// remove deletes key, whose value is v, from the keyspace, and keeps v's
// storage for a key made later (see made): keys come and go on every
// contended call (a queue, the cache mark).
func (s *Server) remove(key string, v *value) {
	delete(s.keys, key)
	if len(s.spare) < 64 {
		s.spare = append(s.spare, v)
	}
}

// made puts a new empty value of kind k at key, on spare storage when
// there is some, and returns it.
func (s *Server) made(key string, k kind) *value {
	var v *value
	if n := len(s.spare); n > 0 {
		v = s.spare[n-1]
		s.spare[n-1] = nil
		s.spare = s.spare[:n-1]
		clear(v.list[:cap(v.list)])
		clear(v.hash[:cap(v.hash)])
		*v = value{kind: k, list: v.list[:0], hash: v.hash[:0]}
	} else {
		v = &value{kind: k}
	}
	if k == kindList && v.list == nil {
		v.list = make([]string, 0, 4)
	}
	if k == kindHash && v.hash == nil {
		v.hash = make([]field, 0, 8)
	}
	s.keys[key] = v
	return v
}

// read records that a read-only command named key: in a tracked call,
// the key is tracked (TrackCommandKeys) or, as Redis 7.0 does, every key
// the call declared.
func (r *run) read(key string) {
	if !r.track {
		return
	}
	if r.s.opt.TrackCommandKeys {
		r.s.track(key, r.c)
		return
	}
	for _, k := range r.keys {
		r.s.track(k, r.c)
	}
}

func (r *run) wrote(key string) { r.s.modified(key, r.c) }

func (r *run) typed(key string, k kind) *value {
	v := r.lookup(key)
	if v != nil && v.kind != k {
		raise(errWrongType)
	}
	return v
}

// readTyped is typed for a read-only command: Redis tracks the keys after
// the command ran, failed or not.
func (r *run) readTyped(key string, k kind) *value {
	v := r.lookup(key)
	r.read(key)
	if v != nil && v.kind != k {
		raise(errWrongType)
	}
	return v
}

func (r *run) get(key string) (string, bool) {
	v := r.readTyped(key, kindString)
	if v == nil {
		return "", false
	}
	return v.str, true
}

// pget is redis.pcall('GET', key): the value (ok false: false, the key is
// missing), or wrong true where the call failed with WRONGTYPE (a table).
func (r *run) pget(key string) (v string, ok, wrong bool) {
	x := r.lookup(key)
	r.read(key)
	switch {
	case x == nil:
		return "", false, false
	case x.kind != kindString:
		return "", false, true
	}
	return x.str, true, false
}

// set is SET key val, with PX px when px > 0.
func (r *run) set(key, val string, px int64) {
	v := r.lookup(key)
	if v == nil {
		v = r.s.made(key, kindString)
	}
	*v = value{kind: kindString, str: val, list: v.list[:0], hash: v.hash[:0]} // in place, storage kept for a later kind
	clear(v.list[:cap(v.list)])
	clear(v.hash[:cap(v.hash)])
	if px > 0 {
		v.expireAt = r.s.ms() + px
	}
	r.wrote(key)
}

// setPX is SET key val PX px with px as a script passes it.
func (r *run) setPX(key, val string, px int64) {
	if px <= 0 {
		raise(errExpireSET)
	}
	r.set(key, val, px)
}

func (r *run) pexpire(key string, ms int64) int64 {
	v := r.lookup(key)
	if v == nil {
		return 0
	}
	if ms <= 0 {
		r.s.remove(key, v)
	} else {
		v.expireAt = r.s.ms() + ms
	}
	r.wrote(key)
	return 1
}

func (r *run) pttl(key string) int64 {
	v := r.lookup(key)
	r.read(key)
	switch {
	case v == nil:
		return -2
	case v.expireAt == 0:
		return -1
	}
	return v.expireAt - r.s.ms()
}

func (r *run) typeOf(key string) string {
	v := r.lookup(key)
	r.read(key)
	if v == nil {
		return "none"
	}
	return v.kind.String()
}

func (r *run) del(key string) int64 {
	v := r.lookup(key)
	if v == nil {
		return 0
	}
	r.s.remove(key, v)
	r.wrote(key)
	return 1
}

// lindex0 is LINDEX key 0.
func (r *run) lindex0(key string) (string, bool) {
	v := r.readTyped(key, kindList)
	if v == nil {
		return "", false
	}
	return v.list[0], true
}

func (r *run) lpop(key string) (string, bool) {
	v := r.typed(key, kindList)
	if v == nil {
		return "", false
	}
	e := v.list[0]
	n := copy(v.list, v.list[1:]) // in place: the storage stays (queues are short)
	v.list[n] = ""
	v.list = v.list[:n]
	if n == 0 {
		r.s.remove(key, v)
	}
	r.wrote(key)
	return e, true
}

func (r *run) rpush(key, e string) int64 {
	v := r.typed(key, kindList)
	if v == nil {
		v = r.s.made(key, kindList)
	}
	v.list = append(v.list, e)
	r.wrote(key)
	return int64(len(v.list))
}

// lpush is LPUSH key e.
func (r *run) lpush(key, e string) int64 {
	v := r.typed(key, kindList)
	if v == nil {
		v = r.s.made(key, kindList)
	}
	v.list = append(v.list, "")
	copy(v.list[1:], v.list)
	v.list[0] = e
	r.wrote(key)
	return int64(len(v.list))
}

// lset is LSET key i e, i 0-based from the head.
func (r *run) lset(key string, i int, e string) {
	v := r.typed(key, kindList)
	if v == nil {
		raise(errNoSuchKey)
	}
	if i < 0 || i >= len(v.list) {
		raise(errOutOfRange)
	}
	v.list[i] = e
	r.wrote(key)
}

// lrem is LREM key 0 e: every element equal to e goes.
func (r *run) lrem(key, e string) int64 {
	v := r.typed(key, kindList)
	if v == nil {
		return 0
	}
	n := 0
	for _, x := range v.list {
		if x != e {
			v.list[n] = x
			n++
		}
	}
	removed := len(v.list) - n
	clear(v.list[n:])
	v.list = v.list[:n]
	if removed == 0 {
		return 0
	}
	if n == 0 {
		r.s.remove(key, v)
	}
	r.wrote(key)
	return int64(removed)
}

// lpos is LPOS key e: the 0-based index of the first element equal to e
// (ok false: nil).
func (r *run) lpos(key, e string) (int, bool) {
	v := r.readTyped(key, kindList)
	if v == nil {
		return 0, false
	}
	for i, x := range v.list {
		if x == e {
			return i, true
		}
	}
	return 0, false
}

// lrange is LRANGE key 0 -1. The slice is the list's own: read it before
// the next write.
func (r *run) lrange(key string) []string {
	v := r.readTyped(key, kindList)
	if v == nil {
		return nil
	}
	return v.list
}

func (r *run) llen(key string) int64 {
	v := r.readTyped(key, kindList)
	if v == nil {
		return 0
	}
	return int64(len(v.list))
}

func (r *run) hget(key, f string) (string, bool) {
	v := r.readTyped(key, kindHash)
	if v == nil {
		return "", false
	}
	if i := v.fieldAt(f); i >= 0 {
		return v.hash[i].val, true
	}
	return "", false
}

// phget is redis.pcall('HGET', key, f), as pget.
func (r *run) phget(key, f string) (v string, ok, wrong bool) {
	x := r.lookup(key)
	r.read(key)
	switch {
	case x == nil:
		return "", false, false
	case x.kind != kindHash:
		return "", false, true
	}
	if i := x.fieldAt(f); i >= 0 {
		return x.hash[i].val, true, false
	}
	return "", false, false
}

func (r *run) hexists(key, f string) int64 {
	if _, ok := r.hget(key, f); ok {
		return 1
	}
	return 0
}

// hset is HSET key f val.
func (r *run) hset(key, f, val string) {
	v := r.typed(key, kindHash)
	if v == nil {
		v = r.s.made(key, kindHash)
	}
	v.put(f, val)
	r.wrote(key)
}

// hset2 is HSET key f1 v1 f2 v2.
func (r *run) hset2(key, f1, v1, f2, v2 string) {
	r.hset(key, f1, v1)
	r.s.keys[key].put(f2, v2) // one command: one signal
}

func (v *value) put(f, val string) {
	if i := v.fieldAt(f); i >= 0 {
		v.hash[i].val = val
		return
	}
	v.hash = append(v.hash, field{f, val})
}

// hdel is HDEL key f [g] (g "" with two false: one field).
func (r *run) hdel(key, f string, g string, two bool) int64 {
	v := r.typed(key, kindHash)
	if v == nil {
		return 0
	}
	n := v.drop(f)
	if two && g != f {
		n += v.drop(g)
	}
	if n == 0 {
		return 0
	}
	if len(v.hash) == 0 {
		r.s.remove(key, v)
	}
	r.wrote(key)
	return n
}

func (v *value) drop(f string) int64 {
	i := v.fieldAt(f)
	if i < 0 {
		return 0
	}
	copy(v.hash[i:], v.hash[i+1:])
	v.hash[len(v.hash)-1] = field{}
	v.hash = v.hash[:len(v.hash)-1]
	return 1
}

// phgetall is redis.pcall('HGETALL', key), as a copy (the scripts write
// while they walk it) in the server's scratch buffer, valid until the next
// phgetall; wrong true where the call failed with WRONGTYPE (a table with
// err).
func (r *run) phgetall(key string) (all []field, wrong bool) {
	x := r.lookup(key)
	r.read(key)
	r.s.fields = r.s.fields[:0]
	switch {
	case x == nil:
		return r.s.fields, false
	case x.kind != kindHash:
		return nil, true
	}
	r.s.fields = append(r.s.fields, x.hash...)
	return r.s.fields, false
}

// nowMicros is TIME, in µs.
func (r *run) nowMicros() int64 { return r.s.us }
