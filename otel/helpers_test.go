package batonotel_test

import (
	"context"
	"testing"

	batonotel "github.com/batonlock/baton/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// harness is an Observer on SDK providers whose output the test reads.
type harness struct {
	obs    *batonotel.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

// newHarness returns an Observer with opt's NameLabel on a ManualReader and
// a SpanRecorder.
func newHarness(t testing.TB, opt batonotel.Options) *harness {
	t.Helper()
	h := &harness{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	opt.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	opt.TracerProvider = h.tp
	obs, err := batonotel.New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.obs = obs
	return h
}

// metrics are the collected instruments by name.
type metrics map[string]metricdata.Metrics

func (h *harness) collect(t testing.TB) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	m := metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != batonotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, batonotel.ScopeName)
		}
		for _, x := range sm.Metrics {
			m[x.Name] = x
		}
	}
	return m
}

// sum returns the value of the data point of the sum name whose attributes
// are exactly kv, or 0 if there is none.
func (m metrics) sum(t testing.TB, name string, kv ...attribute.KeyValue) int64 {
	t.Helper()
	want := attribute.NewSet(kv...)
	s, ok := m[name].Data.(metricdata.Sum[int64])
	if !ok {
		if _, there := m[name]; there {
			t.Fatalf("%s is a %T, not an int64 sum", name, m[name].Data)
		}
		return 0
	}
	for _, dp := range s.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	return 0
}

// total adds up the data points of the sum name, whatever their attributes.
func (m metrics) total(t testing.TB, name string) int64 {
	t.Helper()
	s, _ := m[name].Data.(metricdata.Sum[int64])
	var n int64
	for _, dp := range s.DataPoints {
		n += dp.Value
	}
	return n
}

// hist returns the data point of the histogram name whose attributes are
// exactly kv (a zero one if there is none).
func (m metrics) hist(t testing.TB, name string, kv ...attribute.KeyValue) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	want := attribute.NewSet(kv...)
	hs, ok := m[name].Data.(metricdata.Histogram[float64])
	if !ok {
		if _, there := m[name]; there {
			t.Fatalf("%s is a %T, not a float64 histogram", name, m[name].Data)
		}
		return metricdata.HistogramDataPoint[float64]{}
	}
	for _, dp := range hs.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp
		}
	}
	return metricdata.HistogramDataPoint[float64]{}
}

// attrSets returns every attribute set recorded in the metrics.
func (m metrics) attrSets() []attribute.Set {
	var out []attribute.Set
	for n := range m {
		out = append(out, m.attrSetsOf(n)...)
	}
	return out
}

// attrSetsOf returns every attribute set recorded in the metric name.
func (m metrics) attrSetsOf(name string) []attribute.Set {
	var out []attribute.Set
	switch d := m[name].Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	}
	return out
}

// Attribute helpers.
var (
	how     = attribute.Key("baton.lock.how").String
	reason  = attribute.Key("baton.lock.reason").String
	outcome = attribute.Key("baton.lock.outcome").String
	end     = attribute.Key("baton.lock.end").String
	name    = attribute.Key("baton.lock.name").String
	prim    = attribute.Key("baton.lock.primitive").String
	lock    = prim("lock")
)
