package batonprom_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// figures are the series of a gather, by metric name.
type figures map[string][]*dto.Metric

func gather(t testing.TB, c prometheus.Collector) figures {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	f := figures{}
	for _, mf := range mfs {
		f[mf.GetName()] = mf.Metric
	}
	return f
}

// find returns the series of metric whose labels are exactly labels, or
// nil.
func (f figures) find(metric string, labels map[string]string) *dto.Metric {
	for _, m := range f[metric] {
		got := map[string]string{}
		for _, lp := range m.Label {
			got[lp.GetName()] = lp.GetValue()
		}
		if maps.Equal(got, labels) {
			return m
		}
	}
	return nil
}

// value returns the value of a counter or gauge series, failing the test
// if there is no such series.
func (f figures) value(t testing.TB, metric string, labels map[string]string) float64 {
	t.Helper()
	m := f.find(metric, labels)
	switch {
	case m == nil:
		t.Errorf("no series %s%v", metric, labels)
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Errorf("%s%v is neither a counter nor a gauge", metric, labels)
	return -1
}

// total adds up every series of a counter or gauge.
func (f figures) total(metric string) float64 {
	var n float64
	for _, m := range f[metric] {
		n += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return n
}

// hist returns the sample count and sum of a histogram series, failing the
// test if there is no such series.
func (f figures) hist(t testing.TB, metric string, labels map[string]string) (uint64, float64) {
	t.Helper()
	m := f.find(metric, labels)
	if m == nil || m.Histogram == nil {
		t.Errorf("no histogram %s%v", metric, labels)
		return 0, 0
	}
	return m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum()
}

// histCount adds up the sample counts of every series of a histogram.
func (f figures) histCount(metric string) uint64 {
	var n uint64
	for _, m := range f[metric] {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

type labels = map[string]string

// labelOf returns the value of the label name in lps, or "".
func labelOf(lps []*dto.LabelPair, name string) string {
	for _, lp := range lps {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// show writes a series as the exposition does: metric{k="v",...}.
func show(metric string, l labels) string {
	keys := slices.Sorted(maps.Keys(l))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, l[k])
	}
	return metric + "{" + strings.Join(parts, ",") + "}"
}
