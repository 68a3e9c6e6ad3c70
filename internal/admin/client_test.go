package admin

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/pool"
)

func TestClientWorkersAndReset(t *testing.T) {
	fp := &fakePool{}
	fp.setStates(pool.StateReady, pool.StateBusy)
	s := startServer(t, fp)
	c, err := NewClient(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ws, err := c.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].PID != 1000 || ws[1].PID != 1001 || ws[1].State != "busy" {
		t.Errorf("Workers = %+v, want pids 1000 and 1001", ws)
	}
	res, err := c.Reset(ctx)
	if err != nil || res.Replaced != 2 {
		t.Errorf("Reset = %+v, %v; want 2 replaced", res, err)
	}
	fp.mu.Lock()
	fp.resetErr = errors.New("replace worker 1: boot timeout")
	fp.mu.Unlock()
	if _, err := c.Reset(ctx); err == nil || !strings.Contains(err.Error(), "replace worker 1: boot timeout") {
		t.Errorf("failed Reset: %v, want the server's error", err)
	}
}

func TestClientUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := NewClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Workers(context.Background())
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), addr) {
		t.Errorf("Workers with no server: %v; want ErrUnreachable naming %s", err, addr)
	}
}

func TestClientNotPeregrine(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("<html>hello</html>"))
	}))
	defer other.Close()
	c, err := NewClient(strings.TrimPrefix(other.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Workers(context.Background()); err == nil || !strings.Contains(err.Error(), "admin listener") {
		t.Errorf("Workers against another server: %v", err)
	}
}

func TestClientStarting(t *testing.T) {
	s, err := Listen("127.0.0.1:0", Options{Pool: &fakePool{}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	defer s.Shutdown(context.Background())
	c, err := NewClient(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Workers(context.Background()); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "starting") {
		t.Errorf("Workers while the pool boots: %v, want 503 starting", err)
	}
}

func TestNewClientAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9180": "http://127.0.0.1:9180",
		":9180":          "http://127.0.0.1:9180",
		"0.0.0.0:9180":   "http://127.0.0.1:9180",
		"[::]:9180":      "http://[::1]:9180",
		"[::1]:9180":     "http://[::1]:9180",
		"admin.lan:9180": "http://admin.lan:9180",
	} {
		c, err := NewClient(addr)
		if err != nil || c.base != want {
			t.Errorf("NewClient(%q) = %v, %v; want base %s", addr, c, err, want)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "9180", ""} {
		if _, err := NewClient(addr); err == nil {
			t.Errorf("NewClient(%q): want an error", addr)
		}
	}
}

func TestWriteTable(t *testing.T) {
	started := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ws := []Worker{
		{Slot: 1, PID: 41822, State: "busy", Requests: 1024, RSSBytes: 32715571, Started: started, UptimeSeconds: 8040, BusySeconds: 1.25},
		{Slot: 2, PID: 41823, State: "ready", Requests: 7, RSSBytes: 900, Started: started, UptimeSeconds: 42},
		{Slot: 10, PID: 0, State: "backoff"},
		{Slot: 11, PID: 51234, State: "busy", Requests: 1, RSSBytes: 3 << 30, Started: started, UptimeSeconds: 200000, BusySeconds: 0.3404},
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, ws); err != nil {
		t.Fatal(err)
	}
	want := `SLOT  PID    STATE    REQUESTS  RSS       UPTIME  CURRENT
1     41822  busy     1024      31.2 MiB  2h14m   1.25s
2     41823  ready    7         900 B     42s     -
10    -      backoff  0         -         -       -
11    51234  busy     1         3.0 GiB   2d07h   340ms
`
	if got := buf.String(); got != want {
		t.Errorf("WriteTable:\n%s\nwant:\n%s", got, want)
	}
}

// TestWriteTableGroups: with workers of another group, a GROUP column comes first.
func TestWriteTableGroups(t *testing.T) {
	ws := []Worker{
		{Slot: 1, PID: 41822, State: "ready"},
		{Slot: 1, PID: 41830, State: "ready", Group: "websocket"},
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, ws); err != nil {
		t.Fatal(err)
	}
	want := `GROUP      SLOT  PID    STATE  REQUESTS  RSS  UPTIME  CURRENT
http       1     41822  ready  0         -    -       -
websocket  1     41830  ready  0         -    -       -
`
	if got := buf.String(); got != want {
		t.Errorf("WriteTable:\n%s\nwant:\n%s", got, want)
	}
}

func TestFormatUptime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                              "0s",
		59 * time.Second:               "59s",
		3*time.Minute + 12*time.Second: "3m12s",
		5*time.Hour + 3*time.Minute:    "5h03m",
		50 * time.Hour:                 "2d02h",
	} {
		if got := formatUptime(d); got != want {
			t.Errorf("formatUptime(%v) = %q, want %q", d, got, want)
		}
	}
}
