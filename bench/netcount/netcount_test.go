package netcount

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestCountsWritesPerAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 1<<20)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	c := New()
	c.spill = 8
	conn, err := c.Dial(context.Background(), l.Addr().String(), &net.Dialer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c.Record()
	for _, s := range []string{"*1\r\n$4\r\nPING\r\n", "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n", "12345678", "abc"} {
		if _, err := conn.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	conn.Write([]byte("xyz"))
	ev := c.Stop()
	if len(ev) != 5 {
		t.Fatalf("events %d", len(ev))
	}
	if !ev[0].Ping || !ev[1].Hello || !ev[2].Spill || !ev[3].RoundTrip() || !ev[4].RoundTrip() {
		t.Fatalf("classification %+v", ev)
	}
	ticks := Ticks(ev, 100*time.Millisecond)
	a := l.Addr().String()
	if len(ticks) != 2 || ticks[0][a] != 1 || ticks[1][a] != 1 {
		t.Fatalf("ticks %v", ticks)
	}
	tot := c.Totals()[a]
	if tot.Conns != 1 || tot.Writes != 5 || tot.Pings != 1 {
		t.Fatalf("totals %+v", tot)
	}
}
