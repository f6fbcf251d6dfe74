// Package simredis is Redis's side of baton's scripts as plain Go, for the
// deterministic simulator: a keyspace of strings, lists and hashes with
// expiry on a clock the caller sets, connections with Pub/Sub subscriptions
// and client-side caching (CLIENT TRACKING ON OPTIN NOLOOP), and one Go
// function per Lua script of internal/script that does what the script
// does, command by command, with the same replies and errors.
//
// Each script's Go function mirrors its Lua file line by line, under the
// same helper names (common.go is common.lua, handoff.go is handoff.lua,
// acquire.go is acquire.lua, ...), so that a change to a script is ported
// by editing the same lines here. twin_test.go proves the two equal: it
// runs random operation sequences against this model and against the real
// scripts on a real redis-server and requires the same replies, keys,
// expiry times, messages and invalidations.
//
// # Porting a script change
//
// Edit the Go function of the same name as the Lua one (a Lua helper is a
// method of run, a script a function of its file's name), keeping the
// order of the Redis calls: the order decides which keys a tracked call
// tracks and which invalidations go out. A Lua value that may be nil is a
// Go value with an ok or known flag beside it; a Lua error (a failed
// redis.call, arithmetic on nil) is raise. Then run TestTwin with many
// operations (SIMREDIS_TWIN_OPS=20000).
//
// # Where each script is
//
// handoff.lua (handoff.go): entry, unentry, now (run.now, run.nowMs),
// fence (run.fence), tell (run.tell), grant (run.grant; its accept is
// acceptor, the closure semserve or rwserve makes), requeue (run.requeue).
//
// common.lua (common.go): fmt (fmt0), find, unqueue, head, keep, alive,
// enqueue, release (run.release), parse, cachedby (run.cachedby).
//
// semcommon.lua (semcommon.go): semscan, announce, announceHolder,
// semset, semput, semserve, semaccept, semidle, electvalue.
//
// rwcommon.lua (rwcommon.go): writer, rwscan, rwadmits, rwserve, rwidle.
//
// The scripts: acquire.lua (acquire), release.lua (releaseLock), dequeue.lua
// (dequeue), renew.lua (renew; its kind "p" is run.renewPermit, its gone
// run.gone), force.lua (force), semacquire.lua (semacquire),
// semrelease.lua (semrelease), semdequeue.lua (semdequeue), electread.lua
// (electread), rwacquire.lua (rwacquire), rwrelease.lua (rwrelease),
// rwdequeue.lua (rwdequeue). A "--@handoff" or "--@common" comment marks where the
// script's helpers are made; the Go function goes on there, in one body.
//
// A redis.pcall that reads a key of another type (WRONGTYPE, a table in
// Lua) is run.pget, run.phget or run.phgetall, whose wrong flag is the
// table; a redis.call of a read is run.get, run.hget, ... which raise
// WRONGTYPE as the script's error.
//
// # Numbers
//
// Redis's Lua has one number type, the double. The model computes with
// float64 where the scripts compute, so rounding (lease/2, string.format's
// "%.0f", which rounds half to even) is the same. Fences are µs timestamps
// (about 1.8e15) and deadlines ms timestamps: both stay below 2^53, where a
// double holds every integer exactly, so they compare and format as exact
// integers in both. A Lua number returned in a reply becomes an integer
// truncated toward zero, as Redis converts it.
//
// # Time and expiry
//
// The clock is the caller's (SetTime). TIME inside a script returns it, in
// µs; a script sees one instant (on a real server TIME moves on during a
// script by a few µs, which no script's outcome depends on). A key is gone
// once the clock in ms is past its expiry (Redis: now > when), to every
// command and inspection. SetTime expires the keys some connection tracks
// at once, as Redis's active expiry does, and tells those connections (an
// invalidation); a key nobody tracks just stops being seen. (On a real
// server a tracking connection whose own command meets the expired key
// first deletes it untold, by NOLOOP; the model tells it, as when active
// expiry comes first. Both happen.)
//
// # Connections
//
// A ClientID names one connection. Outside (0) is an anonymous one: the
// operator's redis-cli, another program. Connect makes a connection that
// may subscribe to channels (PUBLISH returns the number of connections
// subscribed) and, with tracking, is told of changes to the keys its
// tracked script calls read: during a call preceded by CLIENT CACHING YES,
// each read-only command tracks keys, present or not (which ones: see
// Options.TrackCommandKeys; a write ends the tracking of the key written,
// so a key read before the call writes it is not tracked after); the next
// change of the key by another connection, its expiry, DEL or
// FLUSHALL sends an invalidation and ends the tracking. The connection's
// own writes end the tracking without telling it (NOLOOP). FLUSHALL tells
// every tracking connection, the flusher too, with a null key. Drop ends a
// connection with its subscriptions and tracking, as a reset does.
//
// # Use
//
// A Server is not safe for concurrent use (the simulator is one
// goroutine); its zero value is not usable: call New. Messages published
// and invalidations are queued in an outbox that Drain empties.
package simredis
