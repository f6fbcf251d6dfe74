package redisx

import "testing"

func TestParseSnapshotAndSub(t *testing.T) {
	a, err := parseSnapshot("# Stats\r\ntotal_commands_processed:100\r\n# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.5\r\n# Commandstats\r\ncmdstat_evalsha:calls=10,usec=5,usec_per_call=0.5,rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls=3,usec=1\r\n")
	if err != nil || a.Commands != 100 || a.CPU != 4 || a.Calls["evalsha"] != 10 {
		t.Fatalf("%+v %v", a, err)
	}
	b := a
	b.Commands, b.CPU = 131, 5
	b.Calls = map[string]int64{"evalsha": 25, "eval": 2, "info": 4}
	a.infos, b.infos = 1, 1
	d := Snapshot{Commands: 131, CPU: 5, Nodes: []NodeSnapshot{b}}.Sub(Snapshot{Commands: 100, CPU: 4, Nodes: []NodeSnapshot{a}})
	if d.Commands != 30 || d.Nodes[0].Scripts() != 17 || d.Scripts() != 17 || d.Nodes[0].Calls["info"] != 0 {
		t.Fatalf("%+v", d)
	}
}
