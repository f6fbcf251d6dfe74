package workload

import (
	"math"
	"sort"
	"time"
)

// FailoverParams is the "failover" scenario: Candidates processes campaign
// in one baton election (one leads, the others wait in its queue) while
// Observers clients Observe it. Each round ends the leader's term, by
// Unlock (Rounds times) and then by SIGKILL of its process (Rounds times),
// and measures how long until the next leader's Campaign returns and until
// every Observe reader has seen it.
type FailoverParams struct {
	Candidates int           `json:"candidates"` // campaigning processes (at least 2)
	Observers  int           `json:"observers"`  // Observe readers: clients of the parent process
	Rounds     int           `json:"rounds"`     // rounds per way of ending the term
	Lease      time.Duration `json:"lease"`      // the candidates' LeaseTTL: bounds the SIGKILL failover
	Settle     time.Duration `json:"settle"`     // pause before each round, with every candidate campaigning
}

// FailoverMetrics is the failover scenario's report.
type FailoverMetrics struct {
	Library    string         `json:"library"`
	Params     FailoverParams `json:"params"`
	Resign     FailoverStats  `json:"resign"` // the term ended by Unlock
	Kill       FailoverStats  `json:"kill"`   // the term ended by SIGKILL of the leader's process
	Errors     []string       `json:"errors,omitempty"`
	SetupError string         `json:"setup_error,omitempty"`
}

// Problems reports a failover run that did not complete its rounds.
func (m *FailoverMetrics) Problems() bool {
	return m.SetupError != "" || len(m.Errors) > 0 ||
		m.Resign.Rounds < m.Params.Rounds || m.Kill.Rounds < m.Params.Rounds
}

// FailoverRound is one measured end of term. Times are nanoseconds from
// the trigger: the leader's Unlock call (taken just before the call), or
// the parent's SIGKILL (just before the kill).
type FailoverRound struct {
	Campaign int64   `json:"campaign_ns"`         // the next leader's Campaign returned
	Observed []int64 `json:"observed_ns"`         // each Observe reader first saw the new leader
	Unlock   int64   `json:"unlock_ns,omitempty"` // resign: the Unlock call took
	Token    uint64  `json:"token"`               // the new leader's fencing token
	Leader   int     `json:"leader_candidate"`    // candidate that took over
	Value    string  `json:"value"`               // its campaign value
	Missing  int     `json:"missing_observers"`   // readers that had not seen it within the timeout
	Order    int     `json:"round"`               // round number
	Via      string  `json:"via"`                 // "unlock" or "sigkill"
}

// FailoverStats summarises the rounds of one way of ending the term.
type FailoverStats struct {
	Rounds int `json:"rounds"`
	// Campaign: trigger -> next leader's Campaign returned.
	CampaignP50US Num `json:"campaign_p50_us"`
	CampaignP90US Num `json:"campaign_p90_us"`
	CampaignMaxUS Num `json:"campaign_max_us"`
	// AllObserved: trigger -> the last Observe reader saw the new leader.
	AllObservedP50US Num `json:"all_observed_p50_us"`
	AllObservedP90US Num `json:"all_observed_p90_us"`
	AllObservedMaxUS Num `json:"all_observed_max_us"`
	// FirstObserved: trigger -> the first Observe reader saw it.
	FirstObservedP50US Num `json:"first_observed_p50_us"`
	// Unlock: the leader's Unlock call (resign only).
	UnlockP50US Num             `json:"unlock_p50_us"`
	Missing     int             `json:"missing_observations"`
	Detail      []FailoverRound `json:"detail"`
}

// Summarise computes the stats of rounds.
func Summarise(rounds []FailoverRound) FailoverStats {
	st := FailoverStats{Rounds: len(rounds), Detail: rounds}
	var camp, all, first, unl []int64
	for _, r := range rounds {
		camp = append(camp, r.Campaign)
		if r.Unlock > 0 {
			unl = append(unl, r.Unlock)
		}
		st.Missing += r.Missing
		if len(r.Observed) == 0 || r.Missing > 0 {
			continue
		}
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		for _, o := range r.Observed {
			lo, hi = min(lo, o), max(hi, o)
		}
		all = append(all, hi)
		first = append(first, lo)
	}
	for _, x := range [][]int64{camp, all, first, unl} {
		sort.Slice(x, func(i, j int) bool { return x[i] < x[j] })
	}
	mx := func(x []int64) Num {
		if len(x) == 0 {
			return Num(math.NaN())
		}
		return us(x[len(x)-1])
	}
	st.CampaignP50US, st.CampaignP90US, st.CampaignMaxUS = us(pct(camp, 50)), us(pct(camp, 90)), mx(camp)
	st.AllObservedP50US, st.AllObservedP90US, st.AllObservedMaxUS = us(pct(all, 50)), us(pct(all, 90)), mx(all)
	st.FirstObservedP50US = us(pct(first, 50))
	st.UnlockP50US = us(pct(unl, 50))
	return st
}
