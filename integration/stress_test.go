//go:build stress

// The stress suite (make stress, docs/reliability.md) drives the real binary with real PHP
// workers under a steady load from the load generator below, injects one kind of fault per
// test, and checks what the clients saw and what the server logged. It reuses the shared harness
// (harness_test.go); this file adds the load generator, a poller of the admin listener's
// /workers, process statistics and the figures each test reports.
//
// The tests run one after the other (never t.Parallel): the machine is shared and small, and
// each test measures latencies and recovery times. Counts are checked exactly; times are checked
// against the bounds of docs/reliability.md and reported, so a noisy machine shows in the
// figures before it fails a run.
//
// Environment knobs:
//
//	STRESS_SCALE=0.2   multiply every scenario's duration (default 1: the figures of the issue)
//	STRESS_SOAK=1m     the soak's duration (default 10m)
//	STRESS_RACE=1      build the binary under test with the race detector (default off: the
//	                   suite measures the binary users run; make test covers races)
package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func init() {
	if os.Getenv("STRESS_RACE") == "" {
		buildFlags = nil
	}
}

// scaled returns d multiplied by STRESS_SCALE.
func scaled(d time.Duration) time.Duration {
	s, err := strconv.ParseFloat(os.Getenv("STRESS_SCALE"), 64)
	if err != nil || s <= 0 {
		return d
	}
	return time.Duration(float64(d) * s)
}

// stressServer is a server started with the admin listener, which the stress tests read.
type stressServer struct {
	*server
	admin string // http://host:port of the admin listener
}

// startStress starts peregrine with yaml plus an admin listener and waits until every worker
// is ready.
func startStress(t *testing.T, yaml string) *stressServer {
	t.Helper()
	addr := freeAddr(t)
	s := &stressServer{server: startServer(t, yaml+"admin:\n  address: "+addr+"\n"), admin: "http://" + addr}
	s.awaitFull(t, 30*time.Second)
	return s
}

func (s *stressServer) pid() int { return s.cmd.Process.Pid }

// workerView is one entry of the admin listener's GET /workers.
type workerView struct {
	Slot  int    `json:"slot"`
	PID   int    `json:"pid"`
	State string `json:"state"`
}

func (w workerView) up() bool { return w.PID > 0 && (w.State == "ready" || w.State == "busy") }

// workers reads GET /workers; nil if it could not.
func (s *stressServer) workers() []workerView {
	r, err := doErr(context.Background(), "GET", s.admin+"/workers", nil)
	if err != nil || r.Status != 200 {
		return nil
	}
	var ws []workerView
	if json.Unmarshal(r.Body, &ws) != nil {
		return nil
	}
	return ws
}

func allUp(ws []workerView) bool {
	if len(ws) == 0 {
		return false
	}
	for _, w := range ws {
		if !w.up() {
			return false
		}
	}
	return true
}

func pidSet(ws []workerView) map[int]bool {
	m := make(map[int]bool, len(ws))
	for _, w := range ws {
		m[w.PID] = true
	}
	return m
}

// awaitFull waits until every worker slot holds a ready or busy process and returns them.
func (s *stressServer) awaitFull(t *testing.T, timeout time.Duration) []workerView {
	t.Helper()
	var ws []workerView
	eventually(t, timeout, "every worker up", func() bool { ws = s.workers(); return allUp(ws) })
	return ws
}

// metric reads one sample of the admin's /metrics (see operations_test.go's metric).
func (s *stressServer) metric(t *testing.T, sample string) float64 {
	t.Helper()
	return metric(t, s.admin, sample)
}

// snapshot is one poll of GET /workers.
type snapshot struct {
	at      time.Time
	workers []workerView
}

// poller polls GET /workers every few milliseconds for as long as the test runs, so that tests
// can find when a slot got its new process after a fault.
type poller struct {
	mu    sync.Mutex
	snaps []snapshot
	stop  chan struct{}
	done  chan struct{}
}

func (s *stressServer) poll(t *testing.T, every time.Duration) *poller {
	p := &poller{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if ws := s.workers(); ws != nil {
				p.mu.Lock()
				p.snaps = append(p.snaps, snapshot{time.Now(), ws})
				p.mu.Unlock()
			}
			select {
			case <-tick.C:
			case <-p.stop:
				return
			}
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *poller) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// latest returns the most recent snapshot's workers.
func (p *poller) latest() []workerView {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.snaps) == 0 {
		return nil
	}
	return p.snaps[len(p.snaps)-1].workers
}

// firstAfter returns the time of the first snapshot taken after t0 that satisfies cond.
func (p *poller) firstAfter(t0 time.Time, cond func([]workerView) bool) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.snaps {
		if s.at.After(t0) && cond(s.workers) {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// count returns how many worker entries, over every snapshot, satisfy cond.
func (p *poller) count(cond func(workerView) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.snaps {
		for _, w := range s.workers {
			if cond(w) {
				n++
			}
		}
	}
	return n
}

// waitAfter waits until a snapshot taken after t0 satisfies cond and returns its time.
func (p *poller) waitAfter(t *testing.T, t0 time.Time, timeout time.Duration, what string, cond func([]workerView) bool) time.Time {
	t.Helper()
	var at time.Time
	eventually(t, timeout, what, func() bool {
		var ok bool
		at, ok = p.firstAfter(t0, cond)
		return ok
	})
	return at
}

// replacedAndFull is the condition "every slot is up and at least one process of before is
// gone": the pool is back to full strength after a fault that cost it a worker.
func replacedAndFull(before map[int]bool) func([]workerView) bool {
	return func(ws []workerView) bool {
		if !allUp(ws) {
			return false
		}
		for _, w := range ws {
			if !before[w.PID] {
				return true
			}
		}
		return false
	}
}

// shot is one request of the load generator.
type shot struct {
	Path    string
	Start   time.Time
	End     time.Time
	Status  int // 0 when Err is set
	Err     error
	Retry   string // the Retry-After header
	PID     int    // from /pid's body
	Latency time.Duration
}

// phase is a stretch of constant offered load.
type phase struct {
	Rate     float64 // requests per second
	Duration time.Duration
}

// loadOptions configure the load generator.
type loadOptions struct {
	Phases []phase
	// Conns bounds the concurrent requests and so the connections (each keeps one).
	Conns int
	// Request builds request i; nil sends GET /pid.
	Request func(i int) (method, path string, body []byte, header http.Header)
	// NoKeepAlive opens a connection per request.
	NoKeepAlive bool
	// Warm, if set, is a path requested Conns times at once before the load starts, so that
	// every connection is open from the start; with it, idle connections are never closed by
	// the generator, and the number of connections stays Conns (when the server keeps them).
	Warm string
}

// load is a running load generator: an open-loop pacer hands numbered tickets to Conns
// goroutines, each sending requests over its own keep-alive connection. When every goroutine is
// busy and the ticket buffer is full, a ticket is skipped and counted: the offered rate is then
// not held, and Result says so. It stops by itself after its phases and waits for the answers
// of the requests in flight.
type load struct {
	base    string
	opts    loadOptions
	client  *http.Client
	start   time.Time
	skipped atomic.Int64
	done    chan struct{}
	stopped chan struct{}

	mu    sync.Mutex
	shots []shot
}

// startLoad starts a load generator against base (the server's URL).
func startLoad(t *testing.T, base string, o loadOptions) *load {
	t.Helper()
	if o.Conns == 0 {
		o.Conns = 64
	}
	tr := &http.Transport{
		MaxConnsPerHost:     o.Conns,
		MaxIdleConnsPerHost: o.Conns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
		DisableKeepAlives:   o.NoKeepAlive,
	}
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	if o.Warm != "" {
		tr.IdleConnTimeout = 0
		var wg sync.WaitGroup
		for range o.Conns {
			wg.Go(func() {
				resp, err := client.Get(base + o.Warm)
				if err != nil {
					t.Errorf("warming the connections: %v", err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
		wg.Wait()
	}
	l := &load{
		base: base, opts: o, start: time.Now(),
		client:  client,
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	tickets := make(chan int, o.Conns*4)
	var wg sync.WaitGroup
	for range o.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tickets {
				l.fire(i)
			}
		}()
	}
	go func() {
		defer close(l.done)
		l.pace(tickets)
		close(tickets)
		wg.Wait()
		tr.CloseIdleConnections()
	}()
	t.Cleanup(func() { l.stop(); <-l.done })
	return l
}

// pace hands out tickets at each phase's rate until the phases end or stop is called.
func (l *load) pace(tickets chan<- int) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	i := 0
	phaseStart := l.start
	for _, ph := range l.opts.Phases {
		interval := time.Duration(float64(time.Second) / ph.Rate)
		end := phaseStart.Add(ph.Duration)
		for n := 0; ; n++ {
			due := phaseStart.Add(time.Duration(n) * interval)
			if !due.Before(end) {
				break
			}
			if d := time.Until(due); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-l.stopped:
					return
				}
			}
			select {
			case tickets <- i:
			default:
				l.skipped.Add(1)
			}
			i++
		}
		phaseStart = end
	}
}

// stop ends the load early; the requests in flight still get their answers.
func (l *load) stop() {
	select {
	case <-l.stopped:
	default:
		close(l.stopped)
	}
}

func (l *load) fire(i int) {
	method, path, body, header := "GET", "/pid", []byte(nil), http.Header(nil)
	if l.opts.Request != nil {
		method, path, body, header = l.opts.Request(i)
	}
	s := shot{Path: path, Start: time.Now()}
	req, err := http.NewRequest(method, l.base+path, bytes.NewReader(body))
	if err == nil {
		for k, v := range header {
			req.Header[k] = v
		}
		var resp *http.Response
		resp, err = l.client.Do(req)
		if err == nil {
			var b []byte
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			s.Status, s.Retry = resp.StatusCode, resp.Header.Get("Retry-After")
			if path == "/pid" && resp.StatusCode == 200 {
				s.PID, _ = strconv.Atoi(string(b))
			}
		}
	}
	s.End = time.Now()
	s.Latency = s.End.Sub(s.Start)
	if err != nil {
		s.Status, s.Err = 0, err
	}
	l.mu.Lock()
	l.shots = append(l.shots, s)
	l.mu.Unlock()
}

// wait waits for the generator to finish and returns what it saw.
func (l *load) wait() loadResult {
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	shots := slices.Clone(l.shots)
	slices.SortFunc(shots, func(a, b shot) int { return a.Start.Compare(b.Start) })
	return loadResult{Shots: shots, Skipped: int(l.skipped.Load()), Start: l.start, End: time.Now()}
}

// loadResult is what a load generator saw.
type loadResult struct {
	Shots      []shot
	Skipped    int // tickets the generator could not send in time
	Start, End time.Time
}

// count returns how many shots satisfy cond.
func (r loadResult) count(cond func(shot) bool) int {
	n := 0
	for _, s := range r.Shots {
		if cond(s) {
			n++
		}
	}
	return n
}

func (r loadResult) ok() int { return r.count(func(s shot) bool { return s.Status == 200 }) }

// notOK returns the shots that did not get a 200.
func (r loadResult) notOK() []shot {
	var out []shot
	for _, s := range r.Shots {
		if s.Status != 200 {
			out = append(out, s)
		}
	}
	return out
}

// rate returns the requests per second sent between the first and the last start.
func (r loadResult) rate() float64 {
	if len(r.Shots) < 2 {
		return 0
	}
	d := r.Shots[len(r.Shots)-1].Start.Sub(r.Shots[0].Start).Seconds()
	return float64(len(r.Shots)-1) / d
}

// between returns the shots that started in [from, to).
func (r loadResult) between(from, to time.Time) loadResult {
	out := loadResult{Start: from, End: to}
	for _, s := range r.Shots {
		if !s.Start.Before(from) && s.Start.Before(to) {
			out.Shots = append(out.Shots, s)
		}
	}
	return out
}

// percentile returns the p-th percentile (0..100) latency of the shots that satisfy cond.
func (r loadResult) percentile(p float64, cond func(shot) bool) time.Duration {
	var lat []time.Duration
	for _, s := range r.Shots {
		if cond == nil || cond(s) {
			lat = append(lat, s.Latency)
		}
	}
	return percentile(lat, p)
}

func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(math.Ceil(p/100*float64(len(lat)))) - 1
	return lat[max(0, min(i, len(lat)-1))]
}

// describe summarizes the failures among shots, at most a few of each kind.
func describe(shots []shot) string {
	kinds := map[string]int{}
	var order []string
	for _, s := range shots {
		k := fmt.Sprintf("%s -> %d", s.Path, s.Status)
		if s.Err != nil {
			k = fmt.Sprintf("%s -> %v", s.Path, s.Err)
		}
		if kinds[k] == 0 {
			order = append(order, k)
		}
		kinds[k]++
	}
	var b strings.Builder
	for _, k := range order {
		fmt.Fprintf(&b, "\n  %d x %s", kinds[k], k)
	}
	return b.String()
}

// refused reports whether err is a refused connection: the server was not listening.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// procStats is what the tests watch of the daemon's process.
type procStats struct {
	At         time.Time
	RSS        int64 // bytes
	FDs        int
	Goroutines int
	Conns      int   // established connections to the public listener
	Zombies    []int // children in state Z
}

func (p procStats) String() string {
	return fmt.Sprintf("RSS %s, %d goroutines, %d open fds, %d client connections, %d zombies",
		mib(p.RSS), p.Goroutines, p.FDs, p.Conns, len(p.Zombies))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// stats reads the daemon's RSS, open descriptors and zombie children from /proc and its
// goroutines from the admin's /metrics.
func (s *stressServer) stats(t *testing.T) procStats {
	t.Helper()
	pid := s.pid()
	st := procStats{At: time.Now(), RSS: rssOf(pid), Zombies: zombieChildren(pid)}
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		st.FDs = len(fds)
	}
	st.Goroutines = int(s.metric(t, "go_goroutines"))
	if u, err := url.Parse(s.URL); err == nil {
		port, _ := strconv.Atoi(u.Port())
		st.Conns = establishedTo(port)
	}
	return st
}

// establishedTo counts the established TCP connections whose local port is port: on loopback,
// the server's side of its clients' connections.
func establishedTo(port int) int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0
	}
	n := 0
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "01" {
			n++
		}
	}
	return n
}

// rssOf returns VmRSS of pid in bytes; 0 if it cannot be read.
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// zombieChildren lists the children of ppid that have exited and not been reaped.
func zombieChildren(ppid int) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so parse after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 2 && f[0] == "Z" && f[1] == strconv.Itoa(ppid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// rssSampler records the daemon's RSS every few milliseconds.
type rssSampler struct {
	mu      sync.Mutex
	samples []procStats
	stop    chan struct{}
	done    chan struct{}
}

func sampleRSS(t *testing.T, pid int, every time.Duration) *rssSampler {
	r := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if rss := rssOf(pid); rss > 0 {
				r.mu.Lock()
				r.samples = append(r.samples, procStats{At: time.Now(), RSS: rss})
				r.mu.Unlock()
			}
			select {
			case <-tick.C:
			case <-r.stop:
				return
			}
		}
	}()
	t.Cleanup(r.close)
	return r
}

func (r *rssSampler) close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// peak returns the largest RSS sampled in [from, to).
func (r *rssSampler) peak(from, to time.Time) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m int64
	for _, s := range r.samples {
		if !s.At.Before(from) && s.At.Before(to) {
			m = max(m, s.RSS)
		}
	}
	return m
}

// figures logs one scenario's figures on a line of its own, which docs/reliability.md quotes:
// `make stress` keeps the whole output in bin/stress.log.
func figures(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURES %s: %s", t.Name(), fmt.Sprintf(format, args...))
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }

// uploadsLeft lists the upload temporary files left in dir.
func uploadsLeft(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "peregrine-upload-*"))
	return m
}

// stressTempDir gives the daemon a temporary directory of its own (uploads land there) and
// returns it. The stress tests never run in parallel, so setting TMPDIR is safe.
func stressTempDir(t *testing.T) string {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	return dir
}

// logEvent is one line of the server's JSON log, the fields the stress tests read.
type logEvent struct {
	Time   time.Time `json:"time"`
	Msg    string    `json:"msg"`
	Worker int       `json:"worker"`
	PID    int       `json:"pid"`
}

// logEvents parses the server's JSON log lines; other lines (the banner) are skipped.
func logEvents(t *testing.T, log string) []logEvent {
	t.Helper()
	var out []logEvent
	for _, line := range strings.Split(log, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e logEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}
