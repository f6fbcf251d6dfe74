package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/redisx"
	"github.com/redis/rueidis"
)

// CurveName is the lock name of the names curve's i-th name.
func CurveName(i int) string { return "lockbench-n-" + strconv.Itoa(i) }

// Bounds of the names curve.
const (
	namesWarmup  = 64
	namesTimeout = 10 * time.Minute
	fillBatch    = 2000
)

// RunNames locks and unlocks names one after another through one client
// of ad (holdingParallelism goroutines), and after each size of cp.Sizes
// reads what stayed: the client's heap and goroutines, and Redis's keys
// and memory, above a baseline taken after a warm-up. Names above cp.Real
// are not locked: Redis is filled with copies of the keys the last real
// name left (see fillNames), and the client is not measured there.
func RunNames(ctx context.Context, ad lockers.Adapter, t lockers.Target, admin *redisx.Admin, cp CurveParams) ([]NamesPoint, error) {
	l, err := ad.New(t)
	if err != nil {
		return nil, fmt.Errorf("new: %w", err)
	}
	defer l.Close()
	warm := make([]string, namesWarmup)
	for i := range warm {
		warm[i] = "lockbench-nw-" + strconv.Itoa(i)
	}
	if errs := churn(ctx, l, warm); len(errs) > 0 {
		return nil, fmt.Errorf("warm-up: %v", errs)
	}
	heap0, g0 := liveHeap()
	keys0, err := admin.DBSize(ctx)
	if err != nil {
		return nil, err
	}
	mem0, err := admin.UsedMemory(ctx)
	if err != nil {
		return nil, err
	}
	var (
		pts   []NamesPoint
		done  int
		tmpl  []string // the keys the last real name left
		tname string
	)
	for _, size := range cp.Sizes {
		pt := NamesPoint{Names: size, Real: size <= cp.Real}
		t0 := time.Now()
		if to := min(size, cp.Real); to > done {
			if errs := churn(ctx, l, curveNames(done, to)); len(errs) > 0 {
				pt.Error = fmt.Sprintf("Lock/Unlock errors: %v", errs)
			}
			done = to
			tname = CurveName(to - 1)
			if tmpl, err = keysOf(ctx, admin.Node(0), tname); err != nil {
				pt.Error = "SCAN: " + err.Error()
			}
		}
		if size > done && pt.Error == "" {
			if err := fillNames(ctx, admin.Node(0), tname, tmpl, done, size); err != nil {
				pt.Error = err.Error()
			}
			done = size
		}
		pt.Seconds = time.Since(t0).Seconds()
		nan := Num(math.NaN())
		pt.HeapBytes, pt.Goroutines = nan, nan
		if pt.Real {
			heap, g := liveHeap()
			pt.HeapBytes, pt.Goroutines = Num(float64(heap)-float64(heap0)), Num(g-g0)
		}
		keys, _ := admin.DBSize(ctx)
		mem, _ := admin.UsedMemory(ctx)
		pt.Keys, pt.MemBytes = keys-keys0, mem-mem0
		pt.KeyTTLSeconds = keyTTL(ctx, admin.Node(0), tmpl)
		pts = append(pts, pt.Fill())
		if ctx.Err() != nil {
			break
		}
	}
	return pts, nil
}

func curveNames(from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, CurveName(i))
	}
	return out
}

// churn locks and unlocks each name once, on holdingParallelism
// goroutines; it returns the errors by message.
func churn(ctx context.Context, l lockers.Locker, names []string) map[string]int {
	errs, done := parallel(ctx, len(names), namesTimeout, func(i int) error {
		u, err := l.Lock(ctx, names[i])
		if err != nil {
			return err
		}
		return u(ctx)
	})
	if !done {
		return map[string]int{"Lock/Unlock calls did not return in time": 1}
	}
	return errs
}

// keysOf finds the keys that name's use left (keys containing name not
// followed by a digit), on a standalone server.
func keysOf(ctx context.Context, c rueidis.Client, name string) ([]string, error) {
	var out []string
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match("*"+globEscape(name)+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		for _, k := range e.Elements {
			i := strings.Index(k, name)
			if rest := k[i+len(name):]; rest == "" || rest[0] < '0' || rest[0] > '9' {
				out = append(out, k)
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			return out, nil
		}
	}
}

func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}

// fillNames stands for locking names [from, to) once each: for every key
// the template name tname left (keys), it restores a copy (DUMP/RESTORE:
// same value, encoding and remaining TTL) under each new name, pipelined,
// through c, a standalone server's client.
func fillNames(ctx context.Context, c rueidis.Client, tname string, keys []string, from, to int) error {
	if tname == "" {
		return errors.New("no real name to copy (the names curve needs Real >= 1)")
	}
	type tmpl struct {
		key, dump string
		ttl       int64
	}
	var ts []tmpl
	for _, k := range keys {
		d, err := c.Do(ctx, c.B().Dump().Key(k).Build()).ToString()
		if err != nil {
			return fmt.Errorf("DUMP %s: %w", k, err)
		}
		ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil {
			return fmt.Errorf("PTTL %s: %w", k, err)
		}
		ts = append(ts, tmpl{k, d, max(ttl, 0)})
	}
	cmds := make(rueidis.Commands, 0, fillBatch)
	flush := func() error {
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return fmt.Errorf("RESTORE: %w", err)
			}
		}
		cmds = cmds[:0]
		return nil
	}
	for i := from; i < to; i++ {
		name := CurveName(i)
		for _, t := range ts {
			k := strings.Replace(t.key, tname, name, 1)
			cmds = append(cmds, c.B().Restore().Key(k).Ttl(t.ttl).SerializedValue(t.dump).Replace().Build())
		}
		if len(cmds) >= fillBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if len(cmds) > 0 {
		return flush()
	}
	return nil
}

// keyTTL is the longest remaining TTL (seconds) of keys, NaN if none
// has one.
func keyTTL(ctx context.Context, c rueidis.Client, keys []string) Num {
	var ms int64 = -1
	for _, k := range keys {
		if v, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64(); err == nil {
			ms = max(ms, v)
		}
	}
	if ms < 0 {
		return Num(math.NaN())
	}
	return Num(float64(ms) / 1000)
}
