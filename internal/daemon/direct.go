package daemon

// direct.go: direct mode (http.direct, docs/direct.md). The daemon opens the listening socket
// and gives it to every worker (fd 5), which accepts, reads and answers HTTP/1.1 itself; the
// daemon serves no HTTP, but starts, limits, resets and stops the workers as in proxied mode.
//
// One socket shared by all the workers, not one SO_REUSEPORT socket per worker: the daemon
// holds it for the server's life, so a worker that leaves (reset, max_jobs, a crash) takes
// no queued connection with it (the others, or its replacement, accept them), where a
// per-worker socket's queue dies with its socket. Every idle worker wakes for a connection
// and one wins the accept (native/direct.c says why not EPOLLEXCLUSIVE).

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/peregrinephp/peregrine/internal/admin"
	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/pool"
)

// directFront stands in for the HTTP server in direct mode: it holds the listening socket
// the workers accept on, until Shutdown.
type directFront struct {
	ln    *net.TCPListener
	file  *os.File // the socket, as the workers get it
	stats *directStats
	done  chan struct{}
	once  sync.Once
}

// listenDirect opens the socket and the counters file for workers workers and as many old ones
// draining beside them after a reset (pool.Pool.Reset waits for a reset's drains before it
// returns, and the next one for any it left), one booting, and room. A worker that finds no
// free row still serves, with counters of its own (native/direct.c says so in the log).
func listenDirect(address string, workers int) (*directFront, error) {
	stats, err := newDirectStats(os.TempDir(), 2*workers+16)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", address)
	if err != nil {
		stats.close()
		return nil, fmt.Errorf("http.address: %w", err)
	}
	f, err := socketFile(ln.(*net.TCPListener))
	if err != nil {
		ln.Close()
		stats.close()
		return nil, fmt.Errorf("http.direct: the listening socket for the workers: %w", err)
	}
	return &directFront{ln: ln.(*net.TCPListener), file: f, stats: stats, done: make(chan struct{})}, nil
}

// socketFile returns a copy of ln's socket for the workers that stays non-blocking. Not
// ln.File(): os/exec calls Fd on each worker's start, and Fd on that file makes the socket
// blocking, for every worker sharing it (one description): a worker whose accept lost the race
// for a connection then blocked in accept4, its kept-alive clients unanswered and its STOP
// unread. os.NewFile of a descriptor already non-blocking leaves it so (os.File.Fd).
func socketFile(ln *net.TCPListener) (*os.File, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	dup, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("dup: %w", derr)
	}
	return os.NewFile(uintptr(dup), "direct-listener"), nil
}

// Serve waits for Shutdown: the workers serve.
func (f *directFront) Serve() error {
	<-f.done
	return http.ErrServerClosed
}

// URL is where the workers serve.
func (f *directFront) URL() string {
	return "http://" + f.ln.Addr().String()
}

// Shutdown closes the daemon's copies of the socket; the workers close theirs as they drain
// (Pool.Stop), and the socket closes with the last.
func (f *directFront) Shutdown(context.Context) error {
	f.once.Do(func() {
		close(f.done)
		f.ln.Close()
		f.file.Close()
	})
	return nil
}

// close releases what Shutdown leaves for the workers' last moments: the counters file.
func (f *directFront) close() error {
	_ = f.Shutdown(context.Background())
	f.stats.close()
	return nil
}

// directEnv is what tells a worker it serves directly, and with which limits:
// PEREGRINE_DIRECT (read by native/direct.c; durations in milliseconds), and where its
// counters go: PEREGRINE_DIRECT_STATS. PEREGRINE_DOCUMENT_ROOT, which native/direct.c would
// pass to PHP as DOCUMENT_ROOT, stays unset: direct mode refuses http.root, and without one
// the proxied front gives PHP no DOCUMENT_ROOT either (integration TestDirectDocumentRootAsProxied).
func (f *directFront) env(cfg config.Config) []string {
	return []string{directEnv(cfg), "PEREGRINE_DIRECT_STATS=" + f.stats.path}
}

func directEnv(cfg config.Config) string {
	h, w := cfg.HTTP, cfg.Workers
	ms := func(d config.Duration) int64 { return time.Duration(d).Milliseconds() }
	spec := []string{
		"fd=5",
		fmt.Sprintf("max_head=%d", 64<<10), // as the proxied front (internal/httpserver)
		fmt.Sprintf("max_fields=%d", h.MaxHeaderCount),
		fmt.Sprintf("max_line=%d", int64(h.MaxHeaderLine)),
		fmt.Sprintf("max_body=%d", int64(h.MaxBodySize)),
		fmt.Sprintf("head_timeout=%d", ms(h.ReadHeaderTimeout)),
		fmt.Sprintf("body_timeout=%d", ms(h.BodyTimeout)),
		fmt.Sprintf("idle_timeout=%d", ms(h.IdleTimeout)),
		fmt.Sprintf("write_timeout=%d", ms(h.WriteTimeout)),
		fmt.Sprintf("max_jobs=%d", w.MaxJobs),
		fmt.Sprintf("max_memory=%d", int64(w.MaxMemory)),
		fmt.Sprintf("exec_timeout=%d", ms(w.ExecTimeout)),
		fmt.Sprintf("max_cookies=%d", h.MaxCookies),
		fmt.Sprintf("max_input_vars=%d", h.MaxInputVars),
	}
	// http.max_connections caps the server's connections: each worker takes its share (at it,
	// it stops accepting and the others or a close take the next). 0: each worker's own default,
	// 10000 or what its open-files limit leaves (native/direct.c).
	if h.MaxConnections > 0 {
		n := w.ResolvedCount()
		spec = append(spec, fmt.Sprintf("max_conns=%d", max(1, (h.MaxConnections+n-1)/n)))
	}
	return "PEREGRINE_DIRECT=" + strings.Join(spec, ",")
}

// directStats is the file of per-worker counters the workers write (native/direct.c's
// struct stats_row, one row a worker, claimed by pid) and the daemon reads, mapped by both.
type directStats struct {
	path string
	mem  []byte
}

// directRowSize is sizeof(struct stats_row): pid and padding, requests, bytes in and out, five
// status classes, twelve latency buckets, busy_since, base_requests.
const directRowSize = 184

// directRow is one worker's counters.
type directRow struct {
	PID       int
	Requests  uint64
	BytesIn   uint64
	BytesOut  uint64
	Status    [5]uint64  // answers by class, 1xx to 5xx
	Latency   [12]uint64 // requests by run time: < 1, 2, 5, 10, 25, 50, 100, 250, 500 ms, 1 s, 5 s, more
	BusySince time.Time  // when the running request began; zero when idle
	// Own is the requests of the process that has the row now; the other counts go on from
	// the processes that had it before.
	Own uint64
}

// newDirectStats creates the counters file with rows rows in dir.
func newDirectStats(dir string, rows int) (*directStats, error) {
	f, err := os.CreateTemp(dir, "peregrine-direct-stats-")
	if err != nil {
		return nil, fmt.Errorf("http.direct: the workers' counters: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(int64(rows * directRowSize)); err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("http.direct: the workers' counters: %w", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, rows*directRowSize, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("http.direct: the workers' counters: %w", err)
	}
	return &directStats{path: f.Name(), mem: mem}, nil
}

func (s *directStats) close() {
	_ = syscall.Munmap(s.mem)
	_ = os.Remove(s.path)
}

// rows returns the rows in use. A worker writes its row while this reads: each field is read
// whole (aligned 64-bit words), and a count may be one request behind another.
func (s *directStats) rows() []directRow {
	var out []directRow
	for off := 0; off+directRowSize <= len(s.mem); off += directRowSize {
		b := s.mem[off : off+directRowSize]
		pid := int(binary.LittleEndian.Uint32(b))
		if pid == 0 {
			continue
		}
		r := directRow{PID: pid, Requests: binary.LittleEndian.Uint64(b[8:]), BytesIn: binary.LittleEndian.Uint64(b[16:]),
			BytesOut: binary.LittleEndian.Uint64(b[24:])}
		for i := range r.Status {
			r.Status[i] = binary.LittleEndian.Uint64(b[32+8*i:])
		}
		for i := range r.Latency {
			r.Latency[i] = binary.LittleEndian.Uint64(b[72+8*i:])
		}
		if ns := binary.LittleEndian.Uint64(b[168:]); ns != 0 {
			r.BusySince = time.Unix(0, int64(ns))
		}
		if base := binary.LittleEndian.Uint64(b[176:]); base <= r.Requests {
			r.Own = r.Requests - base
		}
		out = append(out, r)
	}
	return out
}

// directAdminPool shows, in `peregrine workers`, what the workers counted themselves: the pool
// hands them no request in direct mode.
type directAdminPool struct {
	admin.Pool
	stats *directStats
}

func (p directAdminPool) Workers() []pool.WorkerInfo {
	byPID := map[int]directRow{}
	for _, r := range p.stats.rows() {
		byPID[r.PID] = r
	}
	infos := p.Pool.Workers()
	for i := range infos {
		if r, ok := byPID[infos[i].PID]; ok && infos[i].PID != 0 {
			infos[i].Requests = int64(r.Own)
			if !r.BusySince.IsZero() && infos[i].State != pool.StateDraining { // draining says more
				infos[i].State, infos[i].BusySince = pool.StateBusy, r.BusySince
			}
		}
	}
	return infos
}

// backstop kills a worker whose request has run exec_timeout and grace more: the worker's own
// timer (native/direct.c) should have ended it at exec_timeout; this is for a worker that
// cannot act on it (signals blocked, stuck in the kernel). It also kills an old worker
// draining after a reset whose counters have not moved for stall (killStalled). It checks
// every second until ctx ends, with the limits in force then (directLimits).
func (s *directStats) backstop(ctx context.Context, p admin.Pool, limits func() (exec, stall time.Duration), log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	seen := map[int]progress{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		limit, stall := limits()
		s.killOverdue(p, limit, now, log)
		s.killStalled(p, stall, now, seen, log)
	}
}

// killOverdue kills the workers, current or draining, whose running request began before
// now - limit.
func (s *directStats) killOverdue(p admin.Pool, limit time.Duration, now time.Time, log *slog.Logger) []int {
	live := map[int]bool{}
	for _, w := range p.Workers() {
		live[w.PID] = w.PID != 0
	}
	var killed []int
	for _, r := range s.rows() {
		if !live[r.PID] || r.BusySince.IsZero() || now.Sub(r.BusySince) <= limit {
			continue
		}
		log.Error("a direct-mode worker's request outlived workers.exec_timeout and its own timer: killing the worker",
			"pid", r.PID, "running", now.Sub(r.BusySince).Round(time.Millisecond).String())
		_ = syscall.Kill(r.PID, syscall.SIGKILL)
		killed = append(killed, r.PID)
	}
	return killed
}

// directGrace is how long past exec_timeout the daemon waits for a worker's own timer, and past
// its other limits for a draining worker that shows no progress.
const directGrace = 5 * time.Second

// directLimits returns the backstop's limits under the config a reload last applied (a reload
// changes workers.exec_timeout and stop_timeout; the http keys need a restart): how long a
// request may run (exec_timeout + directGrace), and how long a draining worker may stand still
// (drainStall).
func directLimits(r *reloader) func() (exec, stall time.Duration) {
	return func() (time.Duration, time.Duration) {
		r.mu.Lock()
		cfg := *r.running
		r.mu.Unlock()
		return time.Duration(cfg.Workers.ExecTimeout) + directGrace, drainStall(cfg)
	}
}

// A progress is what a draining worker's counters summed to, and since when.
type progress struct {
	sum   uint64
	since time.Time
}

// drainStall is how long a draining worker may show no progress (no byte read or written, no
// request ended) before the daemon kills it: each thing a drain waits for is bounded by one
// of the worker's own limits (a read of a body or head, a write, a request's exec_timeout,
// the idle grace of 1 s) or keeps the counters moving, so a worker quiet for longer than the
// longest of them, and stop_timeout, plus directGrace, is hung. A draining worker is thus
// never killed sooner than a reset killed it before it drained in the background (at
// stop_timeout, moving or not).
func drainStall(cfg config.Config) time.Duration {
	h, w := cfg.HTTP, cfg.Workers
	return max(time.Duration(w.StopTimeout), time.Duration(h.BodyTimeout), time.Duration(h.ReadHeaderTimeout),
		time.Duration(h.WriteTimeout), time.Duration(w.ExecTimeout), time.Second) + directGrace
}

// killStalled kills the old workers draining after a reset (pool.StateDraining) whose counters
// have not moved for longer than stall; seen keeps what each showed, and since when, from one
// call to the next. A draining worker without a row (none was free) shows no progress: it gets
// stall from when it was first seen draining.
func (s *directStats) killStalled(p admin.Pool, stall time.Duration, now time.Time, seen map[int]progress, log *slog.Logger) []int {
	sums := map[int]uint64{}
	for _, r := range s.rows() {
		sums[r.PID] = r.Requests + r.BytesIn + r.BytesOut
	}
	draining := map[int]bool{}
	var killed []int
	for _, w := range p.Workers() {
		if w.State != pool.StateDraining || w.PID == 0 {
			continue
		}
		draining[w.PID] = true
		sum := sums[w.PID]
		last, ok := seen[w.PID]
		if !ok || last.sum != sum {
			seen[w.PID] = progress{sum: sum, since: now}
			continue
		}
		if now.Sub(last.since) <= stall {
			continue
		}
		log.Error("a direct-mode worker draining after a reset has made no progress within its limits: killing it",
			"pid", w.PID, "quiet", now.Sub(last.since).Round(time.Second).String())
		_ = syscall.Kill(w.PID, syscall.SIGKILL)
		killed = append(killed, w.PID)
	}
	for pid := range seen {
		if !draining[pid] {
			delete(seen, pid)
		}
	}
	return killed
}

// directCollector feeds /metrics from the counters: the sums over every row, which never go
// back since a row's counts go on from process to process.
type directCollector struct {
	stats                           *directStats
	requests, responses, recv, sent *prometheus.Desc
	duration                        *prometheus.Desc
}

// directBuckets are the upper bounds of the rows' run-time buckets, in seconds.
var directBuckets = []float64{0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5}

func newDirectCollector(s *directStats) *directCollector {
	return &directCollector{
		stats:     s,
		requests:  prometheus.NewDesc("peregrine_direct_requests_total", "Requests the workers answered themselves in direct mode (http.direct).", nil, nil),
		responses: prometheus.NewDesc("peregrine_direct_responses_total", "Answers the workers wrote in direct mode, by status class, refusals of the parser included.", []string{"status_class"}, nil),
		recv:      prometheus.NewDesc("peregrine_direct_received_bytes_total", "Bytes the workers read from their connections in direct mode.", nil, nil),
		sent:      prometheus.NewDesc("peregrine_direct_sent_bytes_total", "Bytes the workers wrote to their connections in direct mode.", nil, nil),
		duration:  prometheus.NewDesc("peregrine_direct_request_duration_seconds", "Time from a request read whole to its answer written, in direct mode.", nil, nil),
	}
}

func (c *directCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.responses
	ch <- c.recv
	ch <- c.sent
	ch <- c.duration
}

func (c *directCollector) Collect(ch chan<- prometheus.Metric) {
	var total directRow
	for _, r := range c.stats.rows() {
		total.Requests += r.Requests
		total.BytesIn += r.BytesIn
		total.BytesOut += r.BytesOut
		for i := range r.Status {
			total.Status[i] += r.Status[i]
		}
		for i := range r.Latency {
			total.Latency[i] += r.Latency[i]
		}
	}
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(total.Requests))
	for i, n := range total.Status {
		ch <- prometheus.MustNewConstMetric(c.responses, prometheus.CounterValue, float64(n), strconv.Itoa(i+1)+"xx")
	}
	ch <- prometheus.MustNewConstMetric(c.recv, prometheus.CounterValue, float64(total.BytesIn))
	ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(total.BytesOut))
	buckets := map[float64]uint64{}
	var cumulative, count uint64
	for i, bound := range directBuckets {
		cumulative += total.Latency[i]
		buckets[bound] = cumulative
	}
	for _, n := range total.Latency {
		count += n
	}
	// The rows keep no sum of run times: the histogram's sum is left at 0.
	ch <- prometheus.MustNewConstHistogram(c.duration, count, 0, buckets)
}
