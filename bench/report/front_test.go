package report

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batonlock/baton/bench/front"
	"github.com/batonlock/baton/bench/workload"
)

func frontResult() ScenarioResult {
	sc, _ := workload.Preset("cross-8x2")
	return ScenarioResult{Scenario: sc, Metrics: []workload.Metrics{
		{Library: "baton", WaitP99US: 22_000, CPUUSPerAcq: 100, Util: 0.74, AcqPerSec: 700},
		{Library: "polling-5ms", WaitP99US: 260_000, CPUUSPerAcq: 120, Util: 0.75},
		{Library: "polling-1ms", WaitP99US: 143_000, CPUUSPerAcq: 311, Util: 0.64},
		{Library: "redsync", WaitP99US: 800_000, CPUUSPerAcq: 90, Util: 0.70},
		{Library: "polling-50ms", WaitP99US: 557_000, CPUUSPerAcq: 83, Util: 0.76},
		{Library: "bsm", SetupError: "refused"},
		{Library: "rueidislock", WaitP99US: 1_000, CPUUSPerAcq: 1, Util: 0.9, Overlaps: 3},
	}}
}

func TestFrontOfAScenario(t *testing.T) {
	v, ok := FrontOf(frontResult())
	if !ok || v.Work != front.Util || len(v.Points) != 6 || !v.OnFront || v.CheapestPeer != "polling-50ms" {
		t.Fatalf("%+v", v)
	}
	// rueidislock overlapped: drawn as broken, not counted.
	if i := slices.IndexFunc(v.Points, func(p front.Point) bool { return p.Library == "rueidislock" }); i < 0 || !v.Points[i].Problems {
		t.Fatalf("points %+v", v.Points)
	}
	rn, _ := workload.Preset("random-names")
	if WorkOf(rn.Params) != front.Throughput {
		t.Fatal("random-names holds nothing: its work is throughput")
	}
	if _, ok := FrontOf(ScenarioResult{Scenario: rn, Metrics: []workload.Metrics{{Library: "bsm"}}}); ok {
		t.Fatal("a front without baton")
	}
	var b strings.Builder
	FrontTable(&b, v)
	FrontSummary(&b, []front.Verdict{v, {Shape: "read-heavy", Missing: "no baton point"}})
	out := b.String()
	for _, want := range []string{"| polling-50ms | 557.0ms | 83.0 | 0.76 |  |", "(broke a promise: not counted)", "baton on the front: **yes**",
		"CPU 1.20x the cheapest peer's (polling-50ms, 83.0 µs): **no**", "| cross-8x2 | 22.0ms | 100.0 | yes |", "| read-heavy | | | no verdict: no baton point"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}

// TestFrontChartData: each polling sweep is one series ordered by
// interval, labelled with it; baton comes first.
func TestFrontChartData(t *testing.T) {
	v, _ := FrontOf(frontResult())
	ss := frontSeriesOf(v)
	if !ss[0].Baton || ss[0].Name != "baton" {
		t.Fatalf("first series %+v", ss[0])
	}
	var sweep *frontSeries
	for i := range ss {
		if strings.HasPrefix(ss[i].Name, "polling") {
			if sweep != nil {
				t.Fatalf("two polling series: %+v", ss)
			}
			sweep = &ss[i]
		}
	}
	if sweep == nil || !slices.Equal(sweep.Labels, []string{"1ms", "5ms", "50ms"}) || sweep.Pts[0].Library != "polling-1ms" || sweep.Pts[2].CPUUS != 83 {
		t.Fatalf("sweep %+v", sweep)
	}
	dir := t.TempDir()
	if err := FrontChart(filepath.Join(dir, "f.png"), v); err != nil {
		t.Fatal(err)
	}
	if err := FrontCharts(filepath.Join(dir, "all.png"), []front.Verdict{v, v, v}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"f.png", "all.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() < 1000 {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

func TestCurveTablesAndCharts(t *testing.T) {
	nan := workload.Num(math.NaN())
	curves := []*workload.CurveResult{
		{Kind: workload.CurveWaiters, Waiters: []workload.WaitersPoint{
			{Primitive: "lock", Sessions: 100, Procs: 4, WaitCPU: 0.005, CPUPerHandoffUS: 265, CmdsPerHandoff: 8.9, GapP99US: 1300, Handoffs: 600, HandoffSecs: 3},
			{Primitive: "lock", Sessions: 1000, Procs: 4, WaitCPU: 0.089, CPUPerHandoffUS: 918, CmdsPerHandoff: 21.2, GapP99US: 4500, Handoffs: 600, HandoffSecs: 3},
			{Primitive: "semaphore", Sessions: 100, Procs: 4, Limit: 4, Error: "refused"},
		}},
		{Kind: workload.CurveNames, Names: []workload.NamesPoint{
			workload.NamesPoint{Names: 10_000, Real: true, HeapBytes: 2000, Keys: 10_001, MemBytes: 1_800_000, KeyTTLSeconds: 3599}.Fill(),
			workload.NamesPoint{Names: 1_000_000, HeapBytes: nan, Goroutines: nan, Keys: 1_000_101, MemBytes: 179 << 20, KeyTTLSeconds: 3590}.Fill(),
		}},
		{Kind: workload.CurveHeld, Held: []workload.HoldingMetrics{
			{Locks: 1000, Acquired: 1000, HeapBytesPerLock: 830, CmdsPerSec: 2000, HoldSeconds: 3, Ticks: 3, RoundTripsPerTick: 1, CPUPerSec: 0.01},
			{Locks: 100_000, Acquired: 100_000, HeapBytesPerLock: 710, CmdsPerSec: 200_000, HoldSeconds: 3, Ticks: 3, RoundTripsPerTick: 1, CPUPerSec: 0.4},
		}},
		{Kind: workload.CurveCommands, Commands: &workload.CommandsResult{
			Standalone: workload.Metrics{Acquisitions: 10, CmdsPerAcq: 8, RedisCalls: map[string]int64{"evalsha": 20}},
			Cluster:    workload.Metrics{Acquisitions: 10, CmdsPerAcq: 13.6, RedisCalls: map[string]int64{"evalsha": 20, "ssubscribe": 3, "hello": 0}},
		}},
	}
	curves[3].Commands.Rows = workload.CommandRows(curves[3].Commands.Standalone, curves[3].Commands.Cluster)
	var b strings.Builder
	for _, c := range curves {
		CurveTable(&b, c)
	}
	out := b.String()
	for _, want := range []string{
		"| waiting sessions | 100 | 1,000 |", "| Redis CPU while they only wait (above idle) | 0.5% core | 8.9% core |", "| Redis CPU per hand-off | 265 µs | 918 µs |",
		"100 to 1,000 sessions (10x the waiters): waiting costs x17.80", "**100 sessions**: refused",
		"| measured | through the client | Redis filled (cheaper) |", "| keys left in Redis | 10,001 | 1,000,101 |", "| Redis memory per name | 180 B | 188 B |",
		"| Redis commands per lock per tick | 2.00 | 2.00 |", "| client heap per lock | 830 B | 710 B |",
		"| SSUBSCRIBE | 0.00 | 0.30 | +0.30 |", "| **all commands** | **8.0** | **13.6** | +5.60 |", "1 other commands",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	// Chart data: what is not measured is not drawn.
	for _, c := range curves[:3] {
		ps := curvePanels(c)
		if len(ps) != 4 {
			t.Fatalf("%s: %d panels", c.Kind, len(ps))
		}
		if c.Kind == workload.CurveNames && len(ps[0].Series[0].XYs) != 1 {
			t.Errorf("client heap drawn where not measured: %v", ps[0].Series[0].XYs)
		}
		if c.Kind == workload.CurveWaiters && (len(ps[1].Series) != 1 || ps[1].Series[0].XYs[1].Y != 918) {
			t.Errorf("waiters panel: %+v", ps[1])
		}
	}
	dir := t.TempDir()
	for _, c := range curves {
		p := filepath.Join(dir, CurveChartName(c.Kind))
		if err := CurveChart(p, c); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(p); err != nil || st.Size() < 1000 {
			t.Fatalf("%s: %v", p, err)
		}
	}
}

func TestLogTicksLabelShortAxes(t *testing.T) {
	var labels []string
	for _, tk := range (logTicks{}).Ticks(0.3, 4) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if !slices.Equal(labels, []string{"0.5", "1", "2"}) {
		t.Errorf("0.3-4: %v", labels)
	}
	labels = nil
	for _, tk := range (logTicks{}).Ticks(120, 180) {
		labels = append(labels, tk.Label)
	}
	if len(labels) != 0 {
		t.Errorf("120-180 has no multiple of a power of ten: %v", labels)
	}
	labels = nil
	for _, tk := range (logTicks{}).Ticks(110, 480) {
		labels = append(labels, tk.Label)
	}
	if !slices.Equal(labels, []string{"200", "300", "400"}) {
		t.Errorf("110-480: %v", labels)
	}
}
