package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/pool"
)

func TestHealthAnswersWhileUp(t *testing.T) {
	fp := &fakePool{}
	s, err := newServer(Options{Pool: fp})
	if err != nil {
		t.Fatal(err)
	}
	for _, phase := range []func(){func() {}, s.SetStarted, s.SetDraining} {
		phase()
		if code, body := get(t, s, http.MethodGet, "/health"); code != http.StatusOK || body != "ok\n" {
			t.Errorf("GET /health = %d %q, want 200 ok", code, body)
		}
	}
}

func TestReady(t *testing.T) {
	tests := []struct {
		name     string
		started  bool
		draining bool
		states   []pool.State
		want     int
		body     string
	}{
		{"all ready", true, false, []pool.State{pool.StateReady, pool.StateReady}, 200, "ready: 2 of 2 workers ready"},
		{"one busy one restarting", true, false, []pool.State{pool.StateBusy, pool.StateBackoff}, 200, "ready: 1 of 2 workers ready"},
		{"every worker down", true, false, []pool.State{pool.StateBackoff, pool.StateStarting, pool.StateBackoff}, 503, "not ready: no worker is ready (2 backoff, 1 starting)"},
		{"all stopping", true, false, []pool.State{pool.StateStopping}, 503, "not ready: no worker is ready (1 stopping)"},
		{"pool still booting", false, false, []pool.State{pool.StateReady}, 503, "not ready: the workers are starting"},
		{"draining", true, true, []pool.State{pool.StateReady, pool.StateReady}, 503, "not ready: the server is stopping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp := &fakePool{}
			fp.setStates(tt.states...)
			s, err := newServer(Options{Pool: fp})
			if err != nil {
				t.Fatal(err)
			}
			if tt.started {
				s.SetStarted()
			}
			if tt.draining {
				s.SetDraining()
			}
			code, body := get(t, s, http.MethodGet, "/ready")
			if code != tt.want || body != tt.body+"\n" {
				t.Errorf("GET /ready = %d %q, want %d %q", code, body, tt.want, tt.body)
			}
		})
	}
}

// /ready flips to 503 as soon as the server drains, and when every worker goes down.
func TestReadyFlips(t *testing.T) {
	s, fp, _ := newTestServer(t)
	if code, _ := get(t, s, http.MethodGet, "/ready"); code != http.StatusOK {
		t.Fatalf("GET /ready = %d, want 200", code)
	}
	fp.setStates(pool.StateStarting, pool.StateBackoff)
	if code, _ := get(t, s, http.MethodGet, "/ready"); code != http.StatusServiceUnavailable {
		t.Errorf("every worker down: GET /ready = %d, want 503", code)
	}
	fp.setStates(pool.StateReady, pool.StateBusy)
	if code, _ := get(t, s, http.MethodGet, "/ready"); code != http.StatusOK {
		t.Errorf("workers back: GET /ready = %d, want 200", code)
	}
	s.SetDraining()
	if code, _ := get(t, s, http.MethodGet, "/ready"); code != http.StatusServiceUnavailable {
		t.Errorf("draining: GET /ready = %d, want 503", code)
	}
}

func TestWorkersList(t *testing.T) {
	s, fp, _ := newTestServer(t)
	now := time.Now()
	fp.mu.Lock()
	fp.workers = []pool.WorkerInfo{
		{Slot: 1, PID: 1000, State: pool.StateBusy, Requests: 42, Started: now.Add(-90 * time.Second), BusySince: now.Add(-2 * time.Second)},
		{Slot: 2, PID: 1001, State: pool.StateReady, Requests: 7, Started: now.Add(-10 * time.Second)},
		{Slot: 3, PID: 12, State: pool.StateBackoff}, // its process is gone: no RSS
	}
	fp.mu.Unlock()

	code, body := get(t, s, http.MethodGet, "/workers")
	if code != http.StatusOK {
		t.Fatalf("GET /workers = %d %s", code, body)
	}
	var ws []Worker
	if err := json.Unmarshal([]byte(body), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 {
		t.Fatalf("got %d workers, want 3: %s", len(ws), body)
	}
	w := ws[0]
	if w.Slot != 1 || w.PID != 1000 || w.State != "busy" || w.Requests != 42 || w.RSSBytes != 1<<20 {
		t.Errorf("worker 1 = %+v", w)
	}
	if w.UptimeSeconds < 90 || w.UptimeSeconds > 120 || w.BusySeconds < 2 || w.BusySeconds > 30 {
		t.Errorf("worker 1 uptime %v busy %v; want about 90 and 2", w.UptimeSeconds, w.BusySeconds)
	}
	if ws[1].BusySeconds != 0 || ws[1].RSSBytes != 2<<20 {
		t.Errorf("worker 2 = %+v, want not busy, 2 MiB", ws[1])
	}
	if ws[2].RSSBytes != 0 || ws[2].UptimeSeconds != 0 {
		t.Errorf("worker 3 = %+v, want no RSS and no uptime", ws[2])
	}
	for _, key := range []string{`"slot"`, `"pid"`, `"state"`, `"requests"`, `"rss_bytes"`, `"started"`, `"uptime_seconds"`, `"busy_seconds"`} {
		if !strings.Contains(body, key) {
			t.Errorf("GET /workers lacks %s: %s", key, body)
		}
	}
}

// The worker list reads the real RSS of real pids.
func TestWorkersRealRSS(t *testing.T) {
	fp := &fakePool{workers: []pool.WorkerInfo{{Slot: 1, PID: os.Getpid(), State: pool.StateReady, Started: time.Now()}}}
	s, err := newServer(Options{Pool: fp})
	if err != nil {
		t.Fatal(err)
	}
	s.SetStarted()
	_, body := get(t, s, http.MethodGet, "/workers")
	var ws []Worker
	if err := json.Unmarshal([]byte(body), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].PID != os.Getpid() || ws[0].RSSBytes <= 0 {
		t.Errorf("GET /workers = %s, want this process's pid and its RSS", body)
	}
}

func TestWorkersBeforeStart(t *testing.T) {
	s, err := newServer(Options{Pool: &fakePool{}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, s, http.MethodGet, "/workers"); code != http.StatusServiceUnavailable {
		t.Errorf("GET /workers before start = %d, want 503", code)
	}
}

func TestReset(t *testing.T) {
	s, fp, _ := newTestServer(t)
	code, body := get(t, s, http.MethodPost, "/reset")
	if code != http.StatusOK {
		t.Fatalf("POST /reset = %d %s", code, body)
	}
	var res ResetResult
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	if res.Replaced != 2 || fp.resets != 1 || !strings.Contains(body, `"duration_seconds"`) {
		t.Errorf("POST /reset = %s after %d resets, want replaced 2 after 1", body, fp.resets)
	}

	fp.resetErr = errors.New("replace worker 2: php: boom")
	code, body = get(t, s, http.MethodPost, "/reset")
	if code != http.StatusInternalServerError || !strings.Contains(body, "replace worker 2: php: boom") {
		t.Errorf("failed reset: POST /reset = %d %s, want 500 with the error", code, body)
	}

	if code, _ := get(t, s, http.MethodGet, "/reset"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /reset = %d, want 405", code)
	}
	s.SetDraining()
	if code, _ := get(t, s, http.MethodPost, "/reset"); code != http.StatusServiceUnavailable {
		t.Errorf("POST /reset while draining = %d, want 503", code)
	}
	if fp.resets != 2 {
		t.Errorf("pool reset %d times, want 2", fp.resets)
	}
}

func TestRoutes(t *testing.T) {
	s, _, _ := newTestServer(t)
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/", 404},
		{"GET", "/metrics/x", 404},
		{"POST", "/metrics", 405},
		{"POST", "/ready", 405},
		{"HEAD", "/health", 200},
		{"HEAD", "/metrics", 200},
	} {
		if code, _ := get(t, s, tt.method, tt.path); code != tt.want {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, code, tt.want)
		}
	}
}

func TestListenPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	m := NewMetrics()
	_, err = Listen(ln.Addr().String(), Options{Pool: &fakePool{}, Metrics: m})
	if err == nil || !strings.Contains(err.Error(), "admin.address") || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("Listen on a port in use: %v; want an error naming the address and admin.address", err)
	}
	// The failed Listen left the metrics free for another try.
	s, err := Listen("127.0.0.1:0", Options{Pool: &fakePool{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// startServer listens on a free port and serves until the test ends.
func startServer(t *testing.T, fp *fakePool) *Server {
	t.Helper()
	return startServerWith(t, Options{Pool: fp})
}

// startServerWith starts a Server with opts on a free loopback port, until the test ends.
func startServerWith(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	s.rss = fakeRSS
	s.SetStarted()
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

func TestServeOverTCP(t *testing.T) {
	fp := &fakePool{}
	fp.setStates(pool.StateReady)
	s := startServer(t, fp)
	resp, err := http.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(body, `peregrine_workers{state="ready"} 1`) {
		t.Errorf("GET /metrics = %d:\n%s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET /metrics Content-Type = %q, want the text format", ct)
	}
}

// Shutdown aborts a reset that is still running, so stopping never waits on it.
func TestShutdownAbortsReset(t *testing.T) {
	fp := &fakePool{resetting: make(chan struct{}, 1)}
	fp.setStates(pool.StateReady)
	s, err := Listen("127.0.0.1:0", Options{Pool: fp})
	if err != nil {
		t.Fatal(err)
	}
	s.SetStarted()
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()

	c, err := NewClient(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	resetErr := make(chan error, 1)
	go func() {
		_, err := c.Reset(context.Background())
		resetErr <- err
	}()
	<-fp.resetting
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if err := <-resetErr; err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("reset during shutdown: %v, want a 500 reporting it incomplete", err)
	}
}

// TestDrainingWorkers: an old worker draining after a reset in direct mode is listed after the
// slots, counted as draining in /metrics, and counted in neither /ready's workers nor a reset's
// replaced ones; its RSS is not reported under the slot its replacement holds (a series twice
// over would fail the whole scrape).
func TestDrainingWorkers(t *testing.T) {
	s, fp, _ := newTestServer(t)
	fp.mu.Lock()
	fp.workers = append(fp.workers, pool.WorkerInfo{Slot: 1, PID: 1005, State: pool.StateDraining, Started: time.Now().Add(-time.Hour)})
	fp.mu.Unlock()
	if code, body := get(t, s, http.MethodGet, "/ready"); code != http.StatusOK || body != "ready: 2 of 2 workers ready\n" {
		t.Errorf("GET /ready = %d %q", code, body)
	}
	mfs := scrape(t, s)
	if v := value(mfs, "peregrine_workers", "state", "draining"); v != 1 {
		t.Errorf(`peregrine_workers{state="draining"} = %v, want 1`, v)
	}
	if v := value(mfs, "peregrine_worker_rss_bytes", "worker", "1"); v != 1<<20 {
		t.Errorf(`peregrine_worker_rss_bytes{worker="1"} = %v, want the current worker's, 1 MiB`, v)
	}
	_, body := get(t, s, http.MethodGet, "/workers")
	var ws []Worker
	if err := json.Unmarshal([]byte(body), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 || ws[2].State != "draining" || ws[2].PID != 1005 || ws[2].RSSBytes != 6<<20 {
		t.Errorf("GET /workers = %s, want the draining worker last, with its RSS", body)
	}
	code, body := get(t, s, http.MethodPost, "/reset")
	var res ResetResult
	if err := json.Unmarshal([]byte(body), &res); code != http.StatusOK || err != nil || res.Replaced != 2 {
		t.Errorf("POST /reset = %d %s, want 2 replaced", code, body)
	}
}

// TestGroupedWorkers: workers of another group (the WebSocket event workers of direct mode)
// are listed with their group, and left out of /ready's count and the pool gauges, whose slot
// labels are the server's own workers'.
func TestGroupedWorkers(t *testing.T) {
	s, fp, _ := newTestServer(t)
	fp.mu.Lock()
	fp.workers = append(fp.workers, pool.WorkerInfo{Slot: 1, PID: 1007, State: pool.StateReady, Group: "websocket"})
	fp.mu.Unlock()
	if code, body := get(t, s, http.MethodGet, "/ready"); code != http.StatusOK || body != "ready: 2 of 2 workers ready\n" {
		t.Errorf("GET /ready = %d %q", code, body)
	}
	mfs := scrape(t, s)
	if v := value(mfs, "peregrine_workers", "state", "ready"); v != 2 {
		t.Errorf(`peregrine_workers{state="ready"} = %v, want the server's 2`, v)
	}
	if v := value(mfs, "peregrine_worker_rss_bytes", "worker", "1"); v != 1<<20 {
		t.Errorf(`peregrine_worker_rss_bytes{worker="1"} = %v, want the server's worker's, 1 MiB`, v)
	}
	_, body := get(t, s, http.MethodGet, "/workers")
	var ws []Worker
	if err := json.Unmarshal([]byte(body), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 || ws[2].Group != "websocket" || ws[0].Group != "" || strings.Contains(body[:strings.Index(body, "1007")], `"group"`) {
		t.Errorf("GET /workers = %s, want the event worker last with its group, and no group on the others", body)
	}
}
