package batongocron

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/batonlock/baton"
	"github.com/go-co-op/gocron/v2"
)

// DefaultTakeover is the default of ElectorOptions.Takeover.
const DefaultTakeover = time.Second

// ErrNotLeader is IsLeader's answer when this instance does not lead (or
// has led for less than ElectorOptions.Takeover).
var ErrNotLeader = errors.New("batongocron: not the leader")

// Campaign retries after errors other than Close wait from minRetry,
// doubling up to maxRetry.
const (
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
)

// ElectorOptions configure an Elector. The zero value selects every default.
type ElectorOptions struct {
	// Value is what this instance campaigns with: the Leader.Value that
	// Election.Leader and Election.Observe report while it leads. Default
	// "<hostname>:<pid>".
	Value string

	// Takeover is how long an instance must have led before IsLeader says
	// so. A run fired by the old leader just before leadership moved is not
	// run again by the new one as long as the schedulers' splay (see the
	// package doc) stays below Takeover. Default DefaultTakeover (1s); a
	// negative value means none.
	Takeover time.Duration
}

// Elector is a gocron.Elector on a baton Election: it campaigns from
// NewElector until Close, campaigns again whenever it loses leadership, and
// IsLeader reports whether it leads. Only the leader's scheduler runs jobs.
//
// An Elector is safe for concurrent use; the zero value is not usable. Close
// it after the scheduler has shut down and before the Client is closed.
type Elector struct {
	e        *baton.Election
	value    string
	takeover time.Duration

	stop context.CancelFunc // ends the campaign goroutine
	done chan struct{}      // closed by the campaign goroutine when it ends

	changed chan<- bool // tests only: told true when won, false when lost, resigned or failed

	mu      sync.Mutex  // protects lead, since and lastErr
	lead    *baton.Lock // the leadership while campaigning won, else nil
	since   time.Time   // when lead was won
	lastErr error       // why the last campaign failed, if it did
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector starts campaigning in the election name of c (c.Election(name))
// in a goroutine that Close stops. It fails with an error matching
// baton.ErrInvalidOptions for a nil Client, and with baton's error for an
// invalid name. The Elector does not own c.
func NewElector(c *baton.Client, name string, opt ElectorOptions) (*Elector, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil Client", baton.ErrInvalidOptions)
	}
	e, err := c.Election(name)
	if err != nil {
		return nil, err
	}
	if opt.Value == "" {
		host, _ := os.Hostname()
		opt.Value = host + ":" + strconv.Itoa(os.Getpid())
	}
	switch {
	case opt.Takeover == 0:
		opt.Takeover = DefaultTakeover
	case opt.Takeover < 0:
		opt.Takeover = 0
	}
	return startElector(e, opt, nil), nil
}

// startElector makes the Elector and starts its campaign; changed, if not
// nil, is told of each change of leadership (tests only).
func startElector(e *baton.Election, opt ElectorOptions, changed chan<- bool) *Elector {
	ctx, stop := context.WithCancel(context.Background())
	el := &Elector{e: e, value: opt.Value, takeover: opt.Takeover, stop: stop, done: make(chan struct{}), changed: changed}
	go el.campaign(ctx)
	return el
}

// IsLeader returns nil while this instance leads and has led for at least
// Takeover, else an error matching ErrNotLeader (which also carries the
// error of the last campaign, if it failed). It asks nothing of Redis:
// baton tells a leader that it lost leadership at its local lease
// deadline, before another instance can win.
func (el *Elector) IsLeader(context.Context) error {
	el.mu.Lock()
	l, since, lastErr := el.lead, el.since, el.lastErr
	el.mu.Unlock()
	switch {
	case l == nil && lastErr != nil:
		return fmt.Errorf("%w: campaign: %w", ErrNotLeader, lastErr)
	case l == nil:
		return ErrNotLeader
	case l.Err() != nil:
		return fmt.Errorf("%w: %w", ErrNotLeader, l.Err())
	case time.Since(since) < el.takeover:
		return fmt.Errorf("%w yet: leading for less than %v", ErrNotLeader, el.takeover)
	}
	return nil
}

// Close stops campaigning, resigns if this instance leads, and waits for
// both. Later IsLeader calls return ErrNotLeader. Closing twice is
// harmless.
func (el *Elector) Close() error {
	el.stop()
	<-el.done
	return nil
}

// campaign is the Elector's goroutine: it campaigns until ctx ends, holds
// leadership until it is lost, and campaigns again.
func (el *Elector) campaign(ctx context.Context) {
	defer close(el.done)
	retry := time.NewTimer(maxRetry)
	retry.Stop()
	defer retry.Stop()
	delay := minRetry
	for {
		l, err := el.e.Campaign(ctx, el.value)
		switch {
		case ctx.Err() != nil || errors.Is(err, baton.ErrClosed):
			if l != nil {
				l.Unlock(context.Background())
			}
			return
		case err != nil:
			// Campaign retries passing Redis trouble itself; this error
			// will not pass soon. IsLeader reports it meanwhile.
			el.mu.Lock()
			el.lastErr = err
			el.mu.Unlock()
			if el.changed != nil {
				el.changed <- false
			}
			retry.Reset(delay)
			delay = min(2*delay, maxRetry)
			select {
			case <-retry.C:
			case <-ctx.Done():
				return
			}
			continue
		}
		delay = minRetry
		el.setLead(l)
		select {
		case <-l.Done(): // lost: campaign again
			el.setLead(nil)
		case <-ctx.Done():
			el.setLead(nil)
			// Resign; bounded by the lease.
			l.Unlock(context.WithoutCancel(ctx))
			return
		}
	}
}

func (el *Elector) setLead(l *baton.Lock) {
	el.mu.Lock()
	el.lead, el.since, el.lastErr = l, time.Now(), nil
	el.mu.Unlock()
	if el.changed != nil {
		el.changed <- l != nil
	}
}
