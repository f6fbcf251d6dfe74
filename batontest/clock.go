package batontest

import (
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// FastForward moves the server's clock forward by d at once, as if d had
// passed with no client reaching Redis: every lease recorded in Redis that
// ends within d is over. Locks expire (their keys' TTLs run out); semaphore
// permits, election leaderships and read-write locks' read and write holds
// are dropped, as the next script touching their name would drop them.
// Nothing else moves: baton's clients keep their own lease deadlines,
// renewals and timers on the real clock, so they find out only when they
// next talk to Redis.
//
// After FastForward by more than a holder's lease, a test can rely on
// this:
//
//   - The name is free: a TryLock, Lock, TryAcquire, Acquire, Campaign,
//     RLock or TryRLock of another Client that no other contender beats to
//     it succeeds at once, with a higher fencing token, and
//     Election.Leader reports ErrNoLeader until someone campaigns.
//   - The old holder hears of it at its next renewal, within LeaseTTL/3
//     of real time, not at FastForward: then its Done closes, its Context
//     is cancelled and its Err matches baton.ErrLockLost; its Unlock
//     returns an error matching ErrLockLost. Until then it believes it
//     holds the name, so a test must not expect the two holders to
//     exclude each other across a FastForward (real time would have told
//     the old holder first).
//   - A call that was waiting for the name (Lock, Acquire, Campaign,
//     RLock) is not woken by FastForward: it looks again at its own timer,
//     at most the holder's lease of real time after it went to sleep, or
//     earlier at its own next renewal, and takes the name then if it is
//     free. Which of several contenders gets a name is not determined, as
//     on a real Redis.
//
// FastForward by less than a lease ends nothing that is being renewed:
// each renewal gives a full lease again, counted from the server's clock.
// FastForward is safe for concurrent use.
func (s *Server) FastForward(d time.Duration) {
	s.scripts.Lock() // no script runs until what the move ended is dropped
	defer s.scripts.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
	// With ClockTTL, moving the clock both expires keys and moves TIME,
	// which the scripts read for the deadlines of permits and queue
	// entries; miniredis's own FastForward would leave TIME behind.
	s.m.SetTime(s.now)
	for db := range s.dbs {
		s.dropExpiredHoldersLocked(s.m.DB(db))
	}
}

// dropExpiredHoldersLocked drops from the semaphore, election and
// read-write lock hashes of db the holders whose deadline is past; s.mu
// and s.scripts are held.
//
// baton's scripts drop them at the next acquisition, release or renewal
// of their name (semscan in internal/script/semcommon.lua, rwscan in
// rwcommon.lua, renew.lua), as they find them. Dropping them at once
// makes the keys show what a lease's end left, as a lock's key, gone
// when its TTL runs out, does: to package admin, to a test that reads
// them, and to a renewal that comes at once, from a client that never
// stopped renewing.
func (s *Server) dropExpiredHoldersLocked(db *miniredis.RedisDB) {
	now := s.now.UnixMilli()
	for _, k := range db.Keys() {
		// "<prefix>:s:{<name>}", "<prefix>:e:{<name>}" or
		// "<prefix>:w:{<name>}", with the last fence in "#f" (see
		// semcommon.lua, rwcommon.lua).
		if !strings.HasSuffix(k, "}") || !strings.Contains(k, ":s:{") && !strings.Contains(k, ":e:{") && !strings.Contains(k, ":w:{") ||
			db.Type(k) != "hash" || db.HGet(k, "#f") == "" {
			continue
		}
		fields, _ := db.HKeys(k)
		for _, f := range fields {
			if strings.HasPrefix(f, "#") {
				continue
			}
			// A holder: "<fence>:<deadline ms>", live while the deadline
			// is after the server's time.
			_, dl, ok := strings.Cut(db.HGet(k, f), ":")
			if ms, err := strconv.ParseInt(dl, 10, 64); ok && err == nil && ms <= now {
				db.HDel(k, f)
			}
		}
	}
}

// gateScripts is the server's pre-hook: it runs every Lua script itself,
// holding s.scripts for reading, so that FastForward can wait for the
// scripts in progress and hold back the others.
func (s *Server) gateScripts(c *server.Peer, cmd string, args ...string) bool {
	switch cmd {
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO":
	default:
		return false
	}
	if _, ok := s.inside.Load(c); ok {
		return false // our own Dispatch below: run the script
	}
	s.scripts.RLock()
	defer s.scripts.RUnlock()
	s.inside.Store(c, struct{}{})
	defer s.inside.Delete(c)
	s.m.Server().Dispatch(c, append([]string{cmd}, args...))
	return true
}
