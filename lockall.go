package baton

import (
	"context"
	"fmt"
	"slices"
)

// LockAll acquires every name of names in the default session; see
// Session.LockAll.
func (c *Client) LockAll(ctx context.Context, names ...string) ([]*Lock, error) {
	return c.def.LockAll(ctx, names...)
}

// LockAll acquires all of names or none, waiting as long as ctx allows, and
// returns their locks in the order of names, each with its own fencing
// token and loss signal (a loss of one releases none of the others: watch
// every Done, or use each lock's Context). It takes them one by one in one
// global order, the names sorted bytewise, whatever order the caller gives
// them in, so that LockAll calls never deadlock one another: every caller
// waits only for names above all it holds. If ctx ends or an acquisition
// fails, it releases what it took before it returns (each release bounded
// by the lease, as Unlock's is, whatever ctx) and leaves no Redis queue,
// and returns the error (matching ctx.Err() when ctx ended).
//
// Names are independent locks: on Redis Cluster they may live in
// different slots (a hash tag, "{order-42}:debit" and "{order-42}:credit",
// puts them in one), and nothing but their order ties them. So a caller
// that holds a lock of its own and calls LockAll can still deadlock with
// another that does the same the other way round. names must be valid,
// distinct lock names (ErrInvalidName); at least one.
func (s *Session) LockAll(ctx context.Context, names ...string) ([]*Lock, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: LockAll of no names", ErrInvalidName)
	}
	order := slices.Clone(names)
	slices.Sort(order)
	for i, n := range order {
		if err := checkName(n); err != nil {
			return nil, err
		}
		if i > 0 && order[i-1] == n {
			return nil, fmt.Errorf("%w: %q given twice to LockAll", ErrInvalidName, truncate(n))
		}
	}
	held := make(map[string]*Lock, len(order))
	for _, n := range order {
		l, err := s.Lock(ctx, n)
		if err != nil {
			for _, h := range held {
				h.Unlock(context.WithoutCancel(ctx))
			}
			return nil, err
		}
		held[n] = l
	}
	out := make([]*Lock, len(names))
	for i, n := range names {
		out[i] = held[n]
	}
	return out, nil
}
