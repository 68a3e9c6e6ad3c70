package admin

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/peregrinephp/peregrine/internal/pool"
)

func TestRequestLabels(t *testing.T) {
	tests := []struct {
		method      string
		status      int
		wantMethod  string
		wantClass   string
		description string
	}{
		{"GET", 200, "GET", "2xx", "plain"},
		{"HEAD", 304, "HEAD", "3xx", "not modified"},
		{"POST", 499, "POST", "4xx", "client went away"},
		{"DELETE", 503, "DELETE", "5xx", "overload"},
		{"PATCH", 101, "PATCH", "1xx", "switching protocols"},
		{"BREW", 418, "other", "4xx", "unknown method"},
		{"get", 200, "other", "2xx", "methods are case-sensitive"},
		{"GET", 0, "GET", "2xx", "nothing written: net/http sends 200"},
		{"PUT", 700, "PUT", "other", "status outside 100..599"},
	}
	for _, tt := range tests {
		t.Run(tt.description, func(t *testing.T) {
			m := NewMetrics()
			m.Request(tt.method, tt.status, time.Millisecond, 0, 0)
			if got := testutil.ToFloat64(m.requests.WithLabelValues(tt.wantMethod, tt.wantClass)); got != 1 {
				t.Errorf("requests{method=%q,status_class=%q} = %v, want 1", tt.wantMethod, tt.wantClass, got)
			}
			if n := testutil.CollectAndCount(m.duration); n != 1 {
				t.Errorf("duration histogram has %d series, want 1", n)
			}
		})
	}
}

func TestRequestCountsBytesAndDuration(t *testing.T) {
	m := NewMetrics()
	m.Request("POST", 201, 31250*time.Microsecond, 100, 2000)
	m.Request("GET", 200, 2*time.Second, 0, 50)
	m.Request("GET", 200, 0, -1, 0) // unknown length: not counted
	if got := testutil.ToFloat64(m.received); got != 100 {
		t.Errorf("received bytes = %v, want 100", got)
	}
	if got := testutil.ToFloat64(m.sent); got != 2050 {
		t.Errorf("sent bytes = %v, want 2050", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("GET", "2xx")); got != 2 {
		t.Errorf("GET 2xx = %v, want 2", got)
	}
	err := testutil.CollectAndCompare(m.duration, strings.NewReader(`
# HELP peregrine_http_request_duration_seconds Time from receiving an HTTP request to having written its response, waiting for a worker included.
# TYPE peregrine_http_request_duration_seconds histogram
peregrine_http_request_duration_seconds_bucket{le="0.001"} 1
peregrine_http_request_duration_seconds_bucket{le="0.0025"} 1
peregrine_http_request_duration_seconds_bucket{le="0.005"} 1
peregrine_http_request_duration_seconds_bucket{le="0.01"} 1
peregrine_http_request_duration_seconds_bucket{le="0.025"} 1
peregrine_http_request_duration_seconds_bucket{le="0.05"} 2
peregrine_http_request_duration_seconds_bucket{le="0.1"} 2
peregrine_http_request_duration_seconds_bucket{le="0.25"} 2
peregrine_http_request_duration_seconds_bucket{le="0.5"} 2
peregrine_http_request_duration_seconds_bucket{le="1"} 2
peregrine_http_request_duration_seconds_bucket{le="2.5"} 3
peregrine_http_request_duration_seconds_bucket{le="5"} 3
peregrine_http_request_duration_seconds_bucket{le="10"} 3
peregrine_http_request_duration_seconds_bucket{le="30"} 3
peregrine_http_request_duration_seconds_bucket{le="60"} 3
peregrine_http_request_duration_seconds_bucket{le="+Inf"} 3
peregrine_http_request_duration_seconds_sum 2.03125
peregrine_http_request_duration_seconds_count 3
`))
	if err != nil {
		t.Error(err)
	}
}

func TestWorkerReplacedAndWaited(t *testing.T) {
	m := NewMetrics()
	for range 3 {
		m.WorkerReplaced("crash")
	}
	m.WorkerReplaced("reset")
	m.WorkerReplaced("brand_new") // a reason added to the pool later is still counted
	m.WorkerReplaced("brand_new")
	for reason, want := range map[string]float64{"crash": 3, "reset": 1, "max_jobs": 0, "brand_new": 2} {
		if got := testutil.ToFloat64(m.replacements.WithLabelValues(reason)); got != want {
			t.Errorf("replacements{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	m.Waited(0)
	m.Waited(200 * time.Millisecond)
	if n := testutil.CollectAndCount(m.wait); n != 1 {
		t.Fatalf("wait histogram has %d series, want 1", n)
	}
}

// The observer methods run on every request: they must not allocate.
func TestObserverDoesNotAllocate(t *testing.T) {
	m := NewMetrics()
	method := string([]byte("GET")) // not a constant, like a parsed request's
	if n := testing.AllocsPerRun(1000, func() {
		m.Request(method, 200, time.Millisecond, 10, 100)
		m.Request("BREW", 499, time.Millisecond, 0, 0)
		m.Waited(time.Millisecond)
		m.WorkerReplaced("max_jobs")
	}); n != 0 {
		t.Errorf("observer methods allocate %v times per call", n)
	}
}

// Scraping /metrics before and after a known number of requests and crashes: the counters move
// by exactly that much.
func TestScrapeCountsExactly(t *testing.T) {
	s, fp, m := newTestServer(t)
	before := scrape(t, s)

	const gets, posts, errs, crashes = 7, 3, 2, 4
	for range gets {
		m.Waited(0)
		m.Request("GET", 200, 5*time.Millisecond, 0, 11)
	}
	for range posts {
		m.Waited(time.Millisecond)
		m.Request("POST", 201, 5*time.Millisecond, 20, 0)
	}
	for range errs {
		m.Request("GET", 502, time.Millisecond, 0, 0)
	}
	for range crashes {
		m.WorkerReplaced("crash")
	}
	fp.mu.Lock()
	fp.waiting = 5
	fp.mu.Unlock()
	fp.setStates(pool.StateBusy, pool.StateReady, pool.StateBackoff)

	after := scrape(t, s)
	delta := func(name string, labels ...string) float64 {
		b := max(value(before, name, labels...), 0) // absent before = 0
		a := value(after, name, labels...)
		if a < 0 {
			t.Fatalf("%s %v missing from /metrics", name, labels)
		}
		return a - b
	}
	counters := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"peregrine_http_requests_total", []string{"method", "GET", "status_class", "2xx"}, gets},
		{"peregrine_http_requests_total", []string{"method", "POST", "status_class", "2xx"}, posts},
		{"peregrine_http_requests_total", []string{"method", "GET", "status_class", "5xx"}, errs},
		{"peregrine_http_requests_total", nil, gets + posts + errs},
		{"peregrine_http_request_duration_seconds", nil, gets + posts + errs},
		{"peregrine_pool_wait_seconds", nil, gets + posts},
		{"peregrine_http_received_bytes_total", nil, posts * 20},
		{"peregrine_http_sent_bytes_total", nil, gets * 11},
		{"peregrine_worker_replacements_total", []string{"reason", "crash"}, crashes},
		{"peregrine_worker_replacements_total", []string{"reason", "max_memory"}, 0},
	}
	for _, c := range counters {
		if got := delta(c.name, c.labels...); got != c.want {
			t.Errorf("%s %v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	gauges := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"peregrine_pool_queue_depth", nil, 5},
		{"peregrine_workers", []string{"state", "busy"}, 1},
		{"peregrine_workers", []string{"state", "ready"}, 1},
		{"peregrine_workers", []string{"state", "backoff"}, 1},
		{"peregrine_workers", []string{"state", "starting"}, 0},
		{"peregrine_workers", []string{"state", "stopping"}, 0},
		{"peregrine_worker_rss_bytes", []string{"worker", "1"}, 1 << 20},
		{"peregrine_worker_rss_bytes", []string{"worker", "3"}, 3 << 20},
	}
	for _, g := range gauges {
		if got := value(after, g.name, g.labels...); got != g.want {
			t.Errorf("%s %v = %v, want %v", g.name, g.labels, got, g.want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if value(after, name) < 0 {
			t.Errorf("%s missing: the Go and process collectors should be registered", name)
		}
	}
}

func TestPoolGaugesWaitForStart(t *testing.T) {
	fp := &fakePool{}
	fp.setStates(pool.StateReady)
	s, err := newServer(Options{Pool: fp})
	if err != nil {
		t.Fatal(err)
	}
	s.rss = fakeRSS
	if v := value(scrape(t, s), "peregrine_workers"); v != -1 {
		t.Errorf("peregrine_workers reported before SetStarted: %v", v)
	}
	s.SetStarted()
	if v := value(scrape(t, s), "peregrine_workers", "state", "ready"); v != 1 {
		t.Errorf("peregrine_workers{state=ready} = %v after SetStarted, want 1", v)
	}
}

func TestMetricNamesFollowConventions(t *testing.T) {
	s, _, m := newTestServer(t)
	m.Request("GET", 200, time.Millisecond, 1, 1)
	m.Waited(0)
	_, body := get(t, s, http.MethodGet, "/metrics")
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "peregrine_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
	for name := range scrape(t, s) {
		if !strings.HasPrefix(name, "peregrine_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("unexpected metric %s", name)
		}
	}
}

func TestMetricsServeOneServer(t *testing.T) {
	m := NewMetrics()
	if _, err := newServer(Options{Pool: &fakePool{}, Metrics: m}); err != nil {
		t.Fatal(err)
	}
	if _, err := newServer(Options{Pool: &fakePool{}, Metrics: m}); err == nil {
		t.Error("a second server on the same Metrics: want an error")
	}
}

// Observers and scrapes run concurrently; -race checks them.
func TestConcurrentObserveAndScrape(t *testing.T) {
	s, fp, m := newTestServer(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				m.Request("GET", 200, time.Millisecond, 1, 1)
				m.Waited(time.Microsecond)
				m.WorkerReplaced("crash")
				m.WorkerReplaced("something_new")
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			fp.setStates(pool.StateBusy, pool.StateStarting)
			scrape(t, s)
		}
	})
	wg.Wait()
	if got := testutil.ToFloat64(m.requests.WithLabelValues("GET", "2xx")); got != 8*500 {
		t.Errorf("GET 2xx = %v, want %d", got, 8*500)
	}
}

func BenchmarkRequest(b *testing.B) {
	m := NewMetrics()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Request("GET", 200, time.Millisecond, 100, 1000)
		}
	})
}

// BenchmarkScrape measures /metrics over 64 workers, reading this process's real statm for each.
func BenchmarkScrape(b *testing.B) {
	fp := &fakePool{}
	for i := range 64 {
		fp.workers = append(fp.workers, pool.WorkerInfo{Slot: i + 1, PID: os.Getpid(), State: pool.StateReady})
	}
	s, err := newServer(Options{Pool: fp})
	if err != nil {
		b.Fatal(err)
	}
	s.SetStarted()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		s.handler.ServeHTTP(httptest.NewRecorder(), req)
	}
}
