package workload

import (
	"math"
	"testing"
	"time"
)

func TestSummariseFailover(t *testing.T) {
	ms := int64(time.Millisecond)
	var rounds []FailoverRound
	for i := 1; i <= 10; i++ {
		rounds = append(rounds, FailoverRound{Campaign: int64(i) * ms, Unlock: 2 * ms,
			Observed: []int64{int64(i)*ms + 1*ms, int64(i)*ms + 3*ms}})
	}
	rounds = append(rounds, FailoverRound{Campaign: 50 * ms, Observed: []int64{60 * ms}, Missing: 1})
	st := Summarise(rounds)
	if st.Rounds != 11 || st.Missing != 1 {
		t.Fatalf("%+v", st)
	}
	// Campaign: 1..10 ms and 50 ms; nearest-rank p50 of 11 values is the 6th.
	if float64(st.CampaignP50US) != 6000 || float64(st.CampaignMaxUS) != 50000 || float64(st.CampaignP90US) != 10000 {
		t.Fatalf("campaign %v %v %v", st.CampaignP50US, st.CampaignP90US, st.CampaignMaxUS)
	}
	// A round with a reader missing is left out of the observer stats.
	if float64(st.AllObservedMaxUS) != 13000 || float64(st.FirstObservedP50US) != 6000 || float64(st.AllObservedP50US) != 8000 {
		t.Fatalf("observed %v %v %v", st.AllObservedP50US, st.AllObservedMaxUS, st.FirstObservedP50US)
	}
	if float64(st.UnlockP50US) != 2000 {
		t.Fatalf("unlock %v", st.UnlockP50US)
	}
	if e := Summarise(nil); e.Rounds != 0 || !math.IsNaN(float64(e.CampaignP50US)) {
		t.Fatalf("empty %+v", e)
	}
}
