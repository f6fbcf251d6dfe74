package simredis

import (
	"sort"
	"strconv"
	"strings"
	"time"
)

// Do runs a plain command on connection c, as baton and operators send
// them outside scripts: SET key value [PX ms] (baton's instance record),
// GET, DEL, EXISTS, PTTL, PEXPIRE, TYPE, RPUSH, LPUSH, HSET, HDEL, PUBLISH, SPUBLISH,
// FLUSHALL. Replies as Eval's; an unknown command is Redis's error.
func (s *Server) Do(c ClientID, args ...string) (res any, err error) {
	if len(args) == 0 {
		return nil, errUnknownCmd
	}
	r := run{s: s, c: s.conns[c]}
	defer catch(&err)
	cmd, a := strings.ToUpper(args[0]), args[1:]
	switch {
	case cmd == "SET" && (len(a) == 2 || len(a) == 4):
		return r.doSet(a)
	case cmd == "GET" && len(a) == 1:
		if v, ok := r.get(a[0]); ok {
			return v, nil
		}
		return nil, nil
	case cmd == "DEL" && len(a) > 0, cmd == "EXISTS" && len(a) > 0:
		n := int64(0)
		for _, k := range a {
			if cmd == "DEL" {
				n += r.del(k)
			} else if r.lookup(k) != nil {
				n++
			}
		}
		return n, nil
	case cmd == "PTTL" && len(a) == 1:
		return r.pttl(a[0]), nil
	case cmd == "PEXPIRE" && len(a) == 2:
		return r.pexpire(a[0], pxStr(a[1])), nil
	case cmd == "TYPE" && len(a) == 1:
		return r.typeOf(a[0]), nil
	case cmd == "RPUSH" && len(a) >= 2, cmd == "LPUSH" && len(a) >= 2:
		n := int64(0)
		for _, e := range a[1:] {
			if cmd == "LPUSH" {
				n = r.lpush(a[0], e)
			} else {
				n = r.rpush(a[0], e)
			}
		}
		return n, nil
	case cmd == "HSET" && len(a) >= 3 && len(a)%2 == 1:
		n := int64(0)
		for i := 1; i < len(a); i += 2 {
			if r.hexists(a[0], a[i]) == 0 {
				n++
			}
			r.hset(a[0], a[i], a[i+1])
		}
		return n, nil // fields added
	case cmd == "HDEL" && len(a) >= 2:
		n := int64(0)
		for _, f := range a[1:] {
			n += r.hdel(a[0], f, "", false)
		}
		return n, nil
	case cmd == "PUBLISH" && len(a) == 2, cmd == "SPUBLISH" && len(a) == 2:
		return s.publish(a[0], a[1], cmd == "SPUBLISH"), nil
	case cmd == "FLUSHALL" && len(a) <= 1:
		s.flushAll()
		return "OK", nil
	case cmd == "SET", cmd == "GET", cmd == "DEL", cmd == "EXISTS", cmd == "PTTL", cmd == "PEXPIRE",
		cmd == "TYPE", cmd == "RPUSH", cmd == "LPUSH", cmd == "HSET", cmd == "HDEL", cmd == "PUBLISH", cmd == "SPUBLISH", cmd == "FLUSHALL":
		return nil, errWrongArgs
	}
	return nil, errUnknownCmd
}

func (r *run) doSet(a []string) (any, error) {
	var px int64
	if len(a) == 4 {
		if !strings.EqualFold(a[2], "PX") {
			return nil, errSyntax
		}
		n, err := strconv.ParseInt(a[3], 10, 64)
		if err != nil {
			return nil, errNotInteger
		}
		if n <= 0 {
			return nil, errExpireSET
		}
		px = n
	}
	r.set(a[0], a[1], px)
	return "OK", nil
}

// flushAll is FLUSHALL: every key goes, and every tracking connection, the
// flusher too, gets a null invalidation.
func (s *Server) flushAll() {
	clear(s.keys)
	for _, c := range s.order {
		if c.tracking {
			s.out = append(s.out, Delivery{To: c.id, Kind: Invalidate, Flush: true})
		}
	}
	clear(s.tracked)
}

// Del deletes keys from outside and returns how many existed.
func (s *Server) Del(keys ...string) int64 {
	r := run{s: s}
	n := int64(0)
	for _, k := range keys {
		n += r.del(k)
	}
	return n
}

// FlushAll deletes every key from outside.
func (s *Server) FlushAll() { s.flushAll() }

// Set writes a string key from outside, with an expiry when px > 0 (whole
// ms, as SET ... PX).
func (s *Server) Set(key, val string, px time.Duration) {
	r := run{s: s}
	r.set(key, val, px.Milliseconds())
}

// KeyInfo is a key and its type ("string", "list", "hash").
type KeyInfo struct {
	Key, Type string
}

// Keys returns the keys that exist now, sorted, with their types.
func (s *Server) Keys() []KeyInfo {
	var out []KeyInfo
	for k := range s.keys {
		if v := s.view(k); v != nil {
			out = append(out, KeyInfo{k, v.kind.String()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// view is key's value if it exists now, changing nothing.
func (s *Server) view(key string) *value {
	v := s.keys[key]
	if v == nil || v.expireAt != 0 && s.ms() > v.expireAt {
		return nil
	}
	return v
}

// Type returns key's type, "none" when missing.
func (s *Server) Type(key string) string {
	if v := s.view(key); v != nil {
		return v.kind.String()
	}
	return "none"
}

// Get returns a string key's value.
func (s *Server) Get(key string) (string, bool) {
	if v := s.view(key); v != nil && v.kind == kindString {
		return v.str, true
	}
	return "", false
}

// LRange returns a list key's elements, head first (a copy).
func (s *Server) LRange(key string) []string {
	if v := s.view(key); v != nil && v.kind == kindList {
		return append([]string(nil), v.list...)
	}
	return nil
}

// HGetAll returns a hash key's fields.
func (s *Server) HGetAll(key string) map[string]string {
	v := s.view(key)
	if v == nil || v.kind != kindHash {
		return nil
	}
	m := make(map[string]string, len(v.hash))
	for _, f := range v.hash {
		m[f.name] = f.val
	}
	return m
}

// PTTL returns key's time to live in ms: -2 when missing, -1 without expiry.
func (s *Server) PTTL(key string) int64 {
	v := s.view(key)
	switch {
	case v == nil:
		return -2
	case v.expireAt == 0:
		return -1
	}
	return v.expireAt - s.ms()
}

// PExpireTime returns key's expiry in ms since the Unix epoch (Redis's
// PEXPIRETIME): -2 when missing, -1 without expiry.
func (s *Server) PExpireTime(key string) int64 {
	v := s.view(key)
	switch {
	case v == nil:
		return -2
	case v.expireAt == 0:
		return -1
	}
	return v.expireAt
}
