package admin

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/peregrinephp/peregrine/internal/httpserver"
	"github.com/peregrinephp/peregrine/internal/pool"
)

// Metrics counts what the HTTP handler and the pool report and exposes it, with the gauges read
// from the pool at scrape time, on its own Prometheus registry (never the global one). It is the
// Observer of both; its methods are safe for concurrent use and cost a few atomic additions on
// the request path: no allocation, no lock, no label lookup.
//
// A nil *Metrics must not be handed to pool.Options or httpserver.Options: leave their Observer
// unset instead.
type Metrics struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec
	requestsBy   [len(methods)][len(classes)]prometheus.Counter
	duration     prometheus.Histogram
	received     prometheus.Counter
	sent         prometheus.Counter
	wait         prometheus.Histogram
	batches      prometheus.Histogram
	replacements *prometheus.CounterVec

	mu         sync.Mutex // guards byReason's growth; known reasons are read without it
	byReason   map[string]prometheus.Counter
	knownCause [len(reasons)]prometheus.Counter
}

var (
	_ pool.Observer       = (*Metrics)(nil)
	_ httpserver.Observer = (*Metrics)(nil)
)

// methods are the method label values; any other method counts as "other", so a client cannot
// create series at will.
var methods = [...]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE", "other"}

// classes are the status_class label values. A status outside 100..599 counts as "other" on a
// slower path.
var classes = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// reasons are the replacement reasons the pool reports (pool.Observer), created up front so
// that they read 0 rather than being absent before the first replacement.
var reasons = [...]string{"crash", "max_jobs", "max_memory", "exec_timeout", "protocol", "reset", "abandoned"}

// Histogram buckets, in seconds. Requests: from a fast hello-world to the default exec_timeout.
// Waits: most are 0 (a free worker), the rest range up to allocate_timeout.
var (
	durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	waitBuckets     = []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// NewMetrics returns Metrics on a fresh registry that also holds the Go runtime and process
// collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "peregrine_http_requests_total",
			Help: "HTTP requests answered, by method and status class (1xx..5xx; 499, client gone, counts as 4xx).",
		}, []string{"method", "status_class"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "peregrine_http_request_duration_seconds",
			Help:    "Time from receiving an HTTP request to having written its response, waiting for a worker included.",
			Buckets: durationBuckets,
		}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "peregrine_http_received_bytes_total",
			Help: "Request body bytes received: what was read, de-chunked, or the multipart parts parsed.",
		}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "peregrine_http_sent_bytes_total",
			Help: "Response body bytes sent.",
		}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "peregrine_pool_wait_seconds",
			Help:    "Time requests spent waiting for a free worker, for requests that reached one.",
			Buckets: waitBuckets,
		}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "peregrine_pool_batch_size",
			Help:    "Requests handed to a worker together, for requests that waited: one write, one wake-up of PHP.",
			Buckets: []float64{1, 2, 4, 8, 16},
		}),
		replacements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "peregrine_worker_replacements_total",
			Help: "Workers replaced, by reason: crash, max_jobs, max_memory, exec_timeout, protocol, reset, abandoned (its client left during a streamed answer).",
		}, []string{"reason"}),
		byReason: make(map[string]prometheus.Counter),
	}
	for i, method := range methods {
		for j, class := range classes {
			m.requestsBy[i][j] = m.requests.WithLabelValues(method, class)
		}
	}
	for i, reason := range reasons {
		m.knownCause[i] = m.replacements.WithLabelValues(reason)
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.duration, m.received, m.sent, m.wait, m.batches, m.replacements,
	)
	return m
}

// Register adds a collector of the server's own to what /metrics serves: direct mode's
// workers count for themselves (internal/daemon/direct.go).
func (m *Metrics) Register(c prometheus.Collector) error {
	return m.reg.Register(c)
}

// Request implements httpserver.Observer: it counts one finished request.
func (m *Metrics) Request(method string, status int, duration time.Duration, bytesIn, bytesOut int64) {
	if c := classIndex(status); c >= 0 {
		m.requestsBy[methodIndex(method)][c].Inc()
	} else {
		m.requests.WithLabelValues(methods[methodIndex(method)], "other").Inc()
	}
	m.duration.Observe(duration.Seconds())
	if bytesIn > 0 {
		m.received.Add(float64(bytesIn))
	}
	if bytesOut > 0 {
		m.sent.Add(float64(bytesOut))
	}
}

// WorkerReplaced implements pool.Observer: it counts one replacement.
func (m *Metrics) WorkerReplaced(reason string) {
	for i, r := range reasons {
		if r == reason {
			m.knownCause[i].Inc()
			return
		}
	}
	// A reason added to the pool after this list: still counted, under its own name.
	m.mu.Lock()
	c, ok := m.byReason[reason]
	if !ok {
		c = m.replacements.WithLabelValues(reason)
		m.byReason[reason] = c
	}
	m.mu.Unlock()
	c.Inc()
}

// Waited implements pool.Observer: it records how long one request waited for a worker.
func (m *Metrics) Waited(d time.Duration) {
	m.wait.Observe(d.Seconds())
}

// Batched implements pool.Observer: it records how many queued requests went to a worker at once.
func (m *Metrics) Batched(n int) {
	m.batches.Observe(float64(n))
}

// methodIndex returns the index of method in methods, the last one for any other.
func methodIndex(method string) int {
	switch method {
	case "GET":
		return 0
	case "HEAD":
		return 1
	case "POST":
		return 2
	case "PUT":
		return 3
	case "PATCH":
		return 4
	case "DELETE":
		return 5
	case "OPTIONS":
		return 6
	case "CONNECT":
		return 7
	case "TRACE":
		return 8
	}
	return len(methods) - 1
}

// classIndex returns the index of status's class in classes, or -1 if it has none. Status 0
// means the handler wrote nothing, which net/http answers with 200.
func classIndex(status int) int {
	if status == 0 {
		return 1
	}
	if status < 100 || status > 599 {
		return -1
	}
	return status/100 - 1
}
