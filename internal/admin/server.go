// Package admin owns the admin listener (admin.address): Prometheus metrics, liveness and
// readiness probes, the worker list and the reset endpoint, together with the collectors behind
// the metrics and the client the peregrine workers and peregrine reset commands use. It is a
// listener of its own, never reachable from the public one, and it does not change how requests
// are handled: the handler and the pool only report to Metrics.
//
// Routes:
//
//	GET  /metrics  Prometheus text format
//	GET  /health   200 while the process is up
//	GET  /ready    200 when a worker is ready and the server is not draining; 503 and why otherwise
//	GET  /workers  JSON list of Worker, one per slot
//	POST /reset    replace every worker like SIGHUP; 200 and a ResetResult when all are done
//	GET  /tables   JSON list of Table, one per shared table (tables.go)
//	GET  /jobs     JSON list of jobs.Status, one per pipeline; POST /jobs/{pipeline}/push, retry,
//	               pause, resume (jobs.go)
//
// Every route is guarded (guard.go): with a token (admin.token) each request must carry
// "Authorization: Bearer TOKEN"; without one the Host header must name this machine (localhost,
// a loopback IP or the listener's own host), so that a web page cannot reach the listener by
// DNS rebinding. Requests a browser marks as cross-origin are refused either way.
//
// A Server goes through three phases, told to it by the daemon:
//
//	Listen ──> (pool starting) ──SetStarted──> serving ──SetDraining──> draining ──Shutdown
//
// Before SetStarted the pool is not touched (/ready says the workers are starting, /workers is
// 503, /metrics has no pool gauges); while draining /ready is 503 and /reset is refused.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// Pool is what the admin listener needs of the worker pool; *pool.Pool is one.
type Pool interface {
	// Workers returns a snapshot of every worker slot.
	Workers() []pool.WorkerInfo
	// Ready returns how many workers can take a request now.
	Ready() int
	// Waiting returns how many requests wait for a worker.
	Waiting() int
	// Reset replaces every worker and returns when all are done or ctx is done.
	Reset(ctx context.Context) error
}

var _ Pool = (*pool.Pool)(nil)

// Options configure a Server.
type Options struct {
	// Pool is the server's worker pool. Required.
	Pool Pool
	// Metrics are served on /metrics with the pool's gauges added; nil means fresh Metrics that
	// count nothing but the pool, Go runtime and process. One Metrics serves one Server.
	Metrics *Metrics
	// Logger receives resets and listener errors; nil discards them.
	Logger *slog.Logger
	// Token, when set, is required of every request as "Authorization: Bearer TOKEN"
	// (admin.token).
	Token string
	// Tables, when set, gives the shared tables' figures for GET /tables and /metrics.
	Tables Tables
	// Jobs, when set, are the pipelines behind /jobs (jobs.go) and their metrics.
	Jobs Jobs

	// WebSocket, when set, gives GET /websocket and the WebSocket metrics (websocket.go).
	WebSocket WebSocket
}

// Server is the admin listener. Its methods are safe for concurrent use.
type Server struct {
	pool      Pool
	log       *slog.Logger
	rss       func(pid int) (int64, error) // worker.ReadRSS; replaced by tests
	handler   http.Handler
	token     string
	tables    Tables    // nil without shared tables
	jobs      Jobs      // nil without jobs.pipelines
	websocket WebSocket // nil in classic mode
	hosts     []string  // Host names allowed besides localhost and loopback IPs: the listener's

	started  atomic.Bool
	draining atomic.Bool
	resetSem chan struct{} // one reset at a time

	base   context.Context // of every request; cancelled by Shutdown to abort a reset
	cancel context.CancelFunc

	srv *http.Server
	ln  net.Listener
}

// Listen binds addr now, so that a port in use is reported at start-up, and returns a Server
// that answers once Serve runs. It registers the pool's gauges on opts.Metrics.
func Listen(addr string, opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (admin.address): %w", addr, err)
	}
	s, err := newServer(opts)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	s.ln = ln
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		s.hosts = append(s.hosts, host)
	}
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// No WriteTimeout: POST /reset answers only when every worker is replaced.
	}
	return s, nil
}

// newServer builds a Server without a listener.
func newServer(opts Options) (*Server, error) {
	if opts.Pool == nil {
		return nil, errors.New("admin: Options.Pool is nil")
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		pool:      opts.Pool,
		log:       opts.Logger,
		rss:       worker.ReadRSS,
		resetSem:  make(chan struct{}, 1),
		token:     opts.Token,
		tables:    opts.Tables,
		jobs:      opts.Jobs,
		websocket: opts.WebSocket,
	}
	if err := opts.Metrics.reg.Register(poolCollector{s}); err != nil {
		return nil, fmt.Errorf("admin: register the pool's metrics: %w", err)
	}
	if opts.Tables != nil {
		if err := opts.Metrics.reg.Register(tablesCollector{opts.Tables}); err != nil {
			return nil, fmt.Errorf("admin: register the tables' metrics: %w", err)
		}
	}
	if opts.Jobs != nil {
		if err := opts.Metrics.reg.Register(jobsCollector{opts.Jobs}); err != nil {
			return nil, fmt.Errorf("admin: register the jobs' metrics: %w", err)
		}
	}
	if opts.WebSocket != nil {
		if err := opts.Metrics.reg.Register(websocketCollector{opts.WebSocket}); err != nil {
			return nil, fmt.Errorf("admin: register the WebSocket metrics: %w", err)
		}
	}
	s.base, s.cancel = context.WithCancel(context.Background())

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Metrics.reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /ready", s.ready)
	mux.HandleFunc("GET /workers", s.workers)
	mux.HandleFunc("POST /reset", s.reset)
	mux.HandleFunc("GET /tables", s.tablesList)
	s.jobRoutes(mux)
	mux.HandleFunc("GET /websocket", s.websocketList)
	s.handler = s.guard(mux)
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve answers requests until Shutdown; it returns nil after a Shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin listener on %s: %w", s.ln.Addr(), err)
	}
	return nil
}

// SetStarted tells the server that the pool has started: from now on it reads the pool.
func (s *Server) SetStarted() { s.started.Store(true) }

// SetDraining tells the server that the daemon is stopping: /ready answers 503 from now on and
// /reset is refused. Metrics and the worker list stay available until Shutdown.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Shutdown aborts a reset in progress, stops accepting connections and waits for the other
// requests in flight until ctx is done, then closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	return err
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	text(w, http.StatusOK, "ok")
}

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	switch {
	case s.draining.Load():
		text(w, http.StatusServiceUnavailable, "not ready: the server is stopping")
	case !s.started.Load():
		text(w, http.StatusServiceUnavailable, "not ready: the workers are starting")
	default:
		if n := s.pool.Ready(); n > 0 {
			text(w, http.StatusOK, fmt.Sprintf("ready: %d of %d workers ready", n, slots(s.pool.Workers())))
			return
		}
		text(w, http.StatusServiceUnavailable, "not ready: no worker is ready ("+stateSummary(s.pool.Workers())+")")
	}
}

// slots counts the server's worker slots in ws, which also lists the old workers still
// draining after a reset in direct mode, and other groups of workers (Group).
func slots(ws []pool.WorkerInfo) int {
	n := 0
	for _, w := range ws {
		if w.State != pool.StateDraining && w.Group == "" {
			n++
		}
	}
	return n
}

// stateSummary counts workers by state, e.g. "2 starting, 2 backoff".
func stateSummary(ws []pool.WorkerInfo) string {
	if len(ws) == 0 {
		return "no workers"
	}
	counts := make(map[pool.State]int)
	var order []pool.State
	for _, w := range ws {
		if counts[w.State] == 0 {
			order = append(order, w.State)
		}
		counts[w.State]++
	}
	parts := make([]string, len(order))
	for i, st := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[st], st)
	}
	return strings.Join(parts, ", ")
}

// Worker describes one worker slot as GET /workers lists it.
type Worker struct {
	Slot     int    `json:"slot"`
	PID      int    `json:"pid"`
	State    string `json:"state"`
	Requests int64  `json:"requests"` // answered by the current process
	// RSSBytes is the process's resident set size; 0 when it could not be read (no process).
	RSSBytes      int64     `json:"rss_bytes"`
	Started       time.Time `json:"started,omitzero"` // when the current process started
	UptimeSeconds float64   `json:"uptime_seconds"`
	// BusySeconds is the age of the request the worker is running; 0 when it is not busy.
	BusySeconds float64 `json:"busy_seconds"`
	// InFlight is how many requests a concurrent worker (workers.concurrency) runs now.
	InFlight int `json:"in_flight,omitempty"`
	// Group is the pool of workers it belongs to when it is not the server's own: "websocket"
	// for the workers that run WebSocket events in direct mode (docs/direct.md).
	Group string `json:"group,omitempty"`
}

func (s *Server) workers(w http.ResponseWriter, _ *http.Request) {
	if !s.started.Load() {
		text(w, http.StatusServiceUnavailable, "the workers are starting")
		return
	}
	now := time.Now()
	infos := s.pool.Workers()
	out := make([]Worker, len(infos))
	for i, in := range infos {
		wk := Worker{Slot: in.Slot, PID: in.PID, State: string(in.State), Requests: in.Requests, Started: in.Started, InFlight: in.InFlight,
			Group: in.Group}
		if in.PID > 0 {
			if rss, err := s.rss(in.PID); err == nil {
				wk.RSSBytes = rss
			}
		}
		if !in.Started.IsZero() {
			wk.UptimeSeconds = now.Sub(in.Started).Seconds()
		}
		if !in.BusySince.IsZero() {
			wk.BusySeconds = now.Sub(in.BusySince).Seconds()
		}
		out[i] = wk
	}
	writeJSON(w, http.StatusOK, out)
}

// ResetResult is the answer to a successful POST /reset.
type ResetResult struct {
	Replaced        int     `json:"replaced"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// errorBody is the JSON answer of a failed POST /reset.
type errorBody struct {
	Error string `json:"error"`
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, errorBody{"the server is stopping"})
		return
	}
	if !s.started.Load() {
		writeJSON(w, http.StatusServiceUnavailable, errorBody{"the workers are starting"})
		return
	}
	select {
	case s.resetSem <- struct{}{}:
		defer func() { <-s.resetSem }()
	case <-ctx.Done():
		return // the client left or the server is shutting down while waiting for another reset
	}
	n := slots(s.pool.Workers())
	start := time.Now()
	s.log.Info("replacing all workers", "by", "admin", "remote", r.RemoteAddr)
	if err := s.pool.Reset(ctx); err != nil {
		s.log.Error("reset incomplete", "by", "admin", "err", err)
		writeJSON(w, http.StatusInternalServerError, errorBody{"reset incomplete: " + err.Error()})
		return
	}
	d := time.Since(start)
	s.log.Info("all workers replaced", "by", "admin", "duration", d.Round(time.Millisecond).String())
	writeJSON(w, http.StatusOK, ResetResult{Replaced: n, DurationSeconds: d.Seconds()})
}

func text(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = fmt.Fprintln(w, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil { // only our own plain structs are written
		text(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
