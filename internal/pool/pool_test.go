package pool

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
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

	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// These tests run real PHP workers (testdata/workers/app.php): the pool's job is supervising
// processes, and a fake process would hide what matters.

func newPool(t *testing.T, opts Options) *Pool {
	t.Helper()
	return startPool(t, withWorker(t, opts))
}

// startPool starts a pool with opts as they are, and stops it when the test ends; a Stop that
// does not return fails the test.
func startPool(t *testing.T, opts Options) *Pool {
	t.Helper()
	p := New(opts)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped := make(chan struct{})
		go func() { p.Stop(ctx); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(20 * time.Second):
			t.Error("Stop did not return")
		}
	})
	return p
}

func withWorker(t *testing.T, opts Options) Options {
	t.Helper()
	script, err := filepath.Abs("../../testdata/workers/app.php")
	if err != nil {
		t.Fatal(err)
	}
	opts.Worker = worker.Options{
		Argv:        []string{"php", script},
		Env:         append(os.Environ(), "PEREGRINE_PROTOCOL=3"),
		BootTimeout: 30 * time.Second,
	}
	return opts
}

// answer keeps the answer of one request.
type answer struct {
	status int
	body   []byte
}

func (a *answer) Frame(typ protocol.Type, _ uint16, payload []byte) error {
	if typ == protocol.TypeResponse {
		r, err := protocol.DecodeResponse(payload)
		if err != nil {
			return err
		}
		a.status, payload = r.Status, r.Body
	}
	a.body = append(a.body, payload...)
	return nil
}

type result struct {
	status int
	body   string
	pid    int
	err    error
}

func call(t *testing.T, p *Pool, ctx context.Context, path, query string) result {
	t.Helper()
	b, err := protocol.AppendRequest(nil, 0, &protocol.Request{Method: "GET", URI: path + "?" + query, Path: path, Query: query,
		Protocol: "HTTP/1.1", Headers: []protocol.Field{{Name: "host", Value: "test"}}})
	if err != nil {
		t.Error(err)
		return result{err: err}
	}
	a := &answer{}
	pid, err := p.Do(ctx, &worker.Call{Frame: b, Answer: a})
	return result{status: a.status, body: string(a.body), pid: pid, err: err}
}

// waitFor polls cond until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func statusOf(err error) int {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Status
	}
	return 0
}

func TestDo(t *testing.T) {
	p := newPool(t, Options{Size: 2})
	res := call(t, p, context.Background(), "/pid", "")
	if res.err != nil || res.status != 200 || res.body != strconv.Itoa(res.pid) {
		t.Fatalf("%+v", res)
	}
	if n := p.Ready(); n != 2 {
		t.Fatalf("Ready() = %d", n)
	}
}

// counting counts worker replacements and records batch sizes.
type counting struct {
	replaced atomic.Int32
	mu       sync.Mutex
	sizes    []int
}

func (c *counting) WorkerReplaced(string) { c.replaced.Add(1) }
func (c *counting) Waited(time.Duration)  {}
func (c *counting) Batched(n int)         { c.mu.Lock(); c.sizes = append(c.sizes, n); c.mu.Unlock() }

func (c *counting) batches() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sizes)
}

// occupy takes p's single worker with a request that cannot end before the test lets it:
// the worker's process is stopped (SIGSTOP) before the request is written to it, and goes on
// (SIGCONT) when release is called, at the latest when the test ends. A request that merely
// ran long (a sleep) had to outlast the test's queuing behind it, however slow the machine:
// when it did not, the worker took the queued requests early, one by one.
func occupy(t *testing.T, p *Pool, wg *sync.WaitGroup) (release func()) {
	t.Helper()
	waitFor(t, "the worker is ready", func() bool { return p.Workers()[0].State == StateReady })
	pid := p.Workers()[0].PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(release) // before the pool's Stop, registered earlier
	wg.Add(1)
	go func() {
		defer wg.Done()
		if r := call(t, p, context.Background(), "/pid", ""); r.err != nil || r.status != 200 {
			t.Errorf("the request that occupied the worker: %+v", r)
		}
	}()
	waitFor(t, "the worker is busy", func() bool { return p.Workers()[0].State == StateBusy })
	return release
}

// batchBehind queues n requests behind the worker of p that occupy took, request i on path(i),
// one at a time, then releases the worker (release) and returns their results once all are
// answered; it fails the test unless the pool handed all n to the worker in one batch (obs
// counts batches), which the tests rely on.
func batchBehind(t *testing.T, p *Pool, wg *sync.WaitGroup, release func(), obs *counting, n int, path func(i int) string) []result {
	t.Helper()
	results := make([]result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = call(t, p, context.Background(), path(i), "")
		}()
		waitFor(t, "the request is queued", func() bool { return p.Waiting() == i+1 })
	}
	release()
	wg.Wait()
	if sizes := obs.batches(); len(sizes) == 0 || sizes[0] != n {
		t.Fatalf("batches %v: the queued requests were not batched, so this test proves nothing", sizes)
	}
	return results
}

// TestBatchSurvivesCrash queues requests behind a busy worker, one of which crashes it. They
// go in one batch (asserted): exactly the crashing request fails, once (one replacement); the
// requests answered before it keep their answers; those after it run on the replacement.
func TestBatchSurvivesCrash(t *testing.T) {
	obs := &counting{}
	p := newPool(t, Options{Size: 1, Observer: obs})
	p.budget = time.Hour // batch whatever the recent request time
	var wg sync.WaitGroup
	release := occupy(t, p, &wg)
	const n = 12
	results := batchBehind(t, p, &wg, release, obs, n, func(i int) string {
		if i == n/2 {
			return "/crash"
		}
		return "/pid"
	})
	for i, r := range results {
		switch {
		case i == n/2:
			if statusOf(r.err) != http.StatusBadGateway || !errors.Is(r.err, worker.ErrExited) {
				t.Errorf("crashing request: %v", r.err)
			}
		case r.err != nil || r.status != 200:
			t.Errorf("request %d: %+v", i, r)
		}
	}
	if got := obs.replaced.Load(); got != 1 {
		t.Errorf("%d workers replaced; the crash must cost one", got)
	}
}

// TestBatchWhoseClientsLeave crashes a batch whose other clients have gone meanwhile: those are
// dropped, not run, and the pool never hands a worker an empty batch.
func TestBatchWhoseClientsLeave(t *testing.T) {
	obs := &counting{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The clients leave while the batch runs its first request: as soon as PHP says it began it
	// (app.php's /sleep writes a line to STDERR first), so once the whole batch was written,
	// and long before the crash behind it lets the replacement take their requests.
	log := slog.New(&onLine{match: "tag=first", do: cancel})
	p := newPool(t, Options{Size: 1, Observer: obs, Logger: log})
	p.budget = time.Hour
	var wg sync.WaitGroup
	release := occupy(t, p, &wg)
	first := make(chan result, 1)
	go func() { first <- call(t, p, context.Background(), "/sleep", "ms=1000&tag=first") }()
	waitFor(t, "the first request is queued", func() bool { return p.Waiting() == 1 })
	crash := make(chan result, 1)
	go func() { crash <- call(t, p, context.Background(), "/crash", "") }()
	waitFor(t, "the crash is queued", func() bool { return p.Waiting() == 2 })
	gone := make(chan result, 3)
	for i := range 3 {
		go func() { gone <- call(t, p, ctx, "/served", "") }()
		waitFor(t, "the request is queued", func() bool { return p.Waiting() == 3+i })
	}
	release()
	if r := <-first; r.err != nil || r.status != 200 {
		t.Fatalf("first: %+v", r)
	}
	if r := <-crash; statusOf(r.err) != http.StatusBadGateway {
		t.Fatalf("crash: %+v", r)
	}
	for range 3 {
		if r := <-gone; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("a request whose client left: %+v", r)
		}
	}
	wg.Wait()
	if sizes := obs.batches(); len(sizes) == 0 || sizes[0] != 5 {
		t.Errorf("batches %v: the five queued requests were not batched, so this test proves nothing", sizes)
	}
	res := call(t, p, context.Background(), "/served", "")
	if res.err != nil || res.body != strconv.Itoa(res.pid)+" 1" {
		t.Fatalf("after: %+v; the abandoned requests reached PHP, or the pool is broken", res)
	}
}

// onLine is a log handler that calls do, once, on the first record whose message contains
// match: a line of a worker's output, logged as the pool reads it.
type onLine struct {
	match string
	do    func()
	once  sync.Once
}

func (h *onLine) Enabled(context.Context, slog.Level) bool { return true }
func (h *onLine) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *onLine) WithGroup(string) slog.Handler            { return h }

func (h *onLine) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.once.Do(h.do)
	}
	return nil
}

func TestQueueLimits(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want error
	}{
		{"max_queue", Options{Size: 1, MaxQueue: 1}, ErrQueueFull},
		{"allocate_timeout", Options{Size: 1, AllocateTimeout: 50 * time.Millisecond}, ErrAllocateTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, tt.opts)
			var wg sync.WaitGroup
			defer wg.Wait()
			release := occupy(t, p, &wg)
			defer release() // before the wait, deferred earlier
			if tt.opts.MaxQueue > 0 {
				wg.Add(1)
				go func() { defer wg.Done(); call(t, p, context.Background(), "/pid", "") }()
				waitFor(t, "one request waits", func() bool { return p.Waiting() == 1 })
				if err := p.Admit(); !errors.Is(err, tt.want) {
					t.Errorf("Admit() = %v, want %v", err, tt.want)
				}
			}
			res := call(t, p, context.Background(), "/pid", "")
			var pe *Error
			if !errors.Is(res.err, tt.want) || !errors.As(res.err, &pe) || pe.Status != http.StatusServiceUnavailable || !pe.RetryAfter {
				t.Fatalf("err = %v, want %v as a 503", res.err, tt.want)
			}
		})
	}
}

func TestCancelledWhileQueuedNeverRuns(t *testing.T) {
	p := newPool(t, Options{Size: 1})
	var wg sync.WaitGroup
	release := occupy(t, p, &wg)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for deadline := time.Now().Add(30 * time.Second); p.Waiting() != 1 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if res := call(t, p, ctx, "/served", ""); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("err = %v", res.err)
	}
	release()
	wg.Wait()
	res := call(t, p, context.Background(), "/served", "")
	if res.body != strconv.Itoa(p.Workers()[0].PID)+" 2" {
		t.Fatalf("served = %q: the cancelled request reached PHP", res.body)
	}
}

func TestExecTimeoutIs504(t *testing.T) {
	p := newPool(t, Options{Size: 1, ExecTimeout: 200 * time.Millisecond})
	if res := call(t, p, context.Background(), "/hang", ""); statusOf(res.err) != http.StatusGatewayTimeout {
		t.Fatalf("%+v", res)
	}
	if res := call(t, p, context.Background(), "/pid", ""); res.err != nil {
		t.Fatalf("after the timeout: %+v", res)
	}
}

// TestStopTimeoutZeroKillsAtOnce: with no budget, Stop kills the worker of a hung request rather
// than waiting for exec_timeout, and the request fails.
func TestStopTimeoutZeroKillsAtOnce(t *testing.T) {
	p := New(withWorker(t, Options{Size: 1, ExecTimeout: time.Hour}))
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	hung := make(chan result, 1)
	go func() { hung <- call(t, p, context.Background(), "/hang", "") }()
	waitFor(t, "the worker is busy", func() bool { return p.Workers()[0].State == StateBusy })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Stop(ctx)
	if r := <-hung; statusOf(r.err) != http.StatusBadGateway {
		t.Fatalf("hung request: %+v", r)
	}
	if res := call(t, p, context.Background(), "/pid", ""); !errors.Is(res.err, ErrStopped) {
		t.Fatalf("after stop: %+v", res)
	}
}

func TestResetReplacesEveryWorker(t *testing.T) {
	p := newPool(t, Options{Size: 2})
	before := map[int]bool{}
	for _, w := range p.Workers() {
		before[w.PID] = true
	}
	if err := p.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, w := range p.Workers() {
		if before[w.PID] || w.State != StateReady {
			t.Fatalf("after reset: %+v (before: %v)", w, before)
		}
	}
}

// TestResetWaitsForTheRunningRequest: a worker busy during a reset finishes its request.
func TestResetWaitsForTheRunningRequest(t *testing.T) {
	p := newPool(t, Options{Size: 1})
	slow := make(chan result, 1)
	go func() { slow <- call(t, p, context.Background(), "/sleep", "ms=300") }()
	waitFor(t, "the worker is busy", func() bool { return p.Workers()[0].State == StateBusy })
	old := p.Workers()[0].PID
	if err := p.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := <-slow; r.err != nil || r.status != 200 || r.pid != old {
		t.Fatalf("the request running during the reset: %+v", r)
	}
	if w := p.Workers()[0]; w.PID == old || w.State != StateReady {
		t.Fatalf("after reset: %+v", w)
	}
}

func TestBackoffDelay(t *testing.T) {
	tests := []struct {
		failures int
		want     time.Duration
	}{
		{0, 0}, {1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {3, 400 * time.Millisecond},
		{8, 10 * time.Second}, {100, 10 * time.Second},
	}
	for _, tt := range tests {
		if got := backoffDelay(tt.failures); got != tt.want {
			t.Errorf("backoffDelay(%d) = %s, want %s", tt.failures, got, tt.want)
		}
	}
}

// A worker killed with SIGKILL right after it booted was killed from outside the script (an
// operator, the OOM killer): its slot boots the replacement at once, without the backoff meant
// for scripts that die by themselves. Found by the stress suite, where random kill -9 of young
// idle workers made their slots back off for up to 400 ms.
func TestSIGKILLAfterBootIsNotACrashLoop(t *testing.T) {
	p := newPool(t, Options{Size: 1})
	for i := range 4 {
		pid := p.Workers()[0].PID
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a new worker is ready", func() bool {
			w := p.Workers()[0]
			if w.State == StateBackoff {
				t.Fatalf("kill %d: the slot backs off after its young worker was killed with SIGKILL", i+1)
			}
			return w.State == StateReady && w.PID != pid && w.PID != 0
		})
	}
}

func TestBatchSizeFollowsRequestTime(t *testing.T) {
	tests := []struct {
		avg     time.Duration
		waiting int
		frame   int
		want    int
	}{
		{0, 40, 100, maxBatch},                     // nothing measured yet: fair share, capped
		{20 * time.Microsecond, 40, 100, maxBatch}, // fast requests: batch
		{2 * time.Millisecond, 40, 100, 5},         // 5 x 2ms fit the budget
		{50 * time.Millisecond, 40, 100, 1},        // slow requests: one at a time
		{20 * time.Microsecond, 3, 100, 2},         // fair share of 3 among 2 workers, rounded up
		{20 * time.Microsecond, 40, 20 << 10, 3},   // no more than one pipe buffer of frames
		{20 * time.Microsecond, 40, 100 << 10, 1},  // a frame larger than the pipe goes alone
	}
	for _, tt := range tests {
		p := New(Options{Size: 2})
		p.slots = make([]*slot, 2)
		p.avgExec.Store(int64(tt.avg))
		for range tt.waiting {
			p.enqueueLocked(&waiter{ctx: context.Background(), call: &worker.Call{Frame: make([]byte, tt.frame)}})
		}
		if got := len(p.takeLocked(&slot{})); got != tt.want {
			t.Errorf("avg %s, %d waiting, frames of %d: batch of %d, want %d", tt.avg, tt.waiting, tt.frame, got, tt.want)
		}
	}
}

// TestResetThenRecycleStopsTheResetWorker: the worker a reset put in place is the one a later
// max_jobs recycle stops (the supervisor used to keep the old one in mind and leave the new one
// running, out of the pool, for good).
func TestResetThenRecycleStopsTheResetWorker(t *testing.T) {
	p := newPool(t, Options{Size: 1, MaxJobs: 2})
	if err := p.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := p.Workers()[0].PID
	for range 2 {
		if res := call(t, p, context.Background(), "/pid", ""); res.err != nil || res.pid != pid {
			t.Fatalf("%+v, want pid %d", res, pid)
		}
	}
	waitFor(t, "the recycled worker's process is gone", func() bool {
		return syscall.Kill(pid, 0) != nil
	})
	if res := call(t, p, context.Background(), "/pid", ""); res.err != nil || res.pid == pid {
		t.Fatalf("after the recycle: %+v", res)
	}
}

// TestSetOptions: a reload's limits apply to the next requests and its worker options to the
// next workers; the number of workers and their concurrency refuse to change.
func TestSetOptions(t *testing.T) {
	p := newPool(t, Options{Size: 1})
	opts := withWorker(t, Options{Size: 1, MaxJobs: 2})
	if err := p.SetOptions(opts); err != nil {
		t.Fatal(err)
	}
	first := call(t, p, context.Background(), "/pid", "")
	second := call(t, p, context.Background(), "/pid", "")
	third := call(t, p, context.Background(), "/pid", "")
	if first.body != second.body || third.body == second.body {
		t.Fatalf("max_jobs 2 after SetOptions: pids %s %s %s", first.body, second.body, third.body)
	}
	for _, bad := range []Options{{Size: 2}, {Size: 1, Concurrency: 4}} {
		if err := p.SetOptions(withWorker(t, bad)); err == nil {
			t.Errorf("SetOptions(%+v) accepted", bad)
		}
	}
	if p.o().MaxJobs != 2 {
		t.Errorf("a refused SetOptions changed the options: max_jobs %d", p.o().MaxJobs)
	}
}

// TestRequeueKeepsABatchInOrder: the requests of a batch that the worker did not read go back
// to the front of the queue one by one, as their outcomes are known, and end up in the batch's
// order, before those that were waiting; one whose predecessor was taken meanwhile goes first.
func TestRequeueKeepsABatchInOrder(t *testing.T) {
	p := New(Options{})
	waiting := &waiter{}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.enqueueLocked(waiting)
	take := func() *waiter { // a worker takes the first
		w := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		p.waiting--
		w.state = member
		return w
	}
	a, b, c := &waiter{}, &waiter{}, &waiter{}
	p.requeueLocked(a, nil)
	p.requeueLocked(b, a)
	p.requeueLocked(c, b)
	if got := p.queue[p.head:]; !slices.Equal(got, []*waiter{a, b, c, waiting}) || p.waiting != 4 {
		t.Fatalf("queue %v (a %p b %p c %p waiting %p), %d waiting", got, a, b, c, waiting, p.waiting)
	}
	take()
	take()
	d, e := &waiter{}, &waiter{}
	p.requeueLocked(d, nil)
	take() // d, before e comes back behind it
	p.requeueLocked(e, d)
	if got := p.queue[p.head:]; !slices.Equal(got, []*waiter{e, c, waiting}) {
		t.Fatalf("after d was taken: queue %v", got)
	}
}

// TestDirectResetDrainsInTheBackground: in direct mode (SelfRetiring) a reset puts each new
// worker in its slot as soon as it has booted and lets the old one drain beside it, listed as
// draining: every slot serves a new worker while the old ones still run, and an old worker
// that takes longer than stop_timeout to exit is not killed (it leaves its mark). Reset
// returns once they are gone.
func TestDirectResetDrainsInTheBackground(t *testing.T) {
	script, err := filepath.Abs("../../testdata/workers/slow-exit.php")
	if err != nil {
		t.Fatal(err)
	}
	marks := t.TempDir()
	p := startPool(t, Options{Size: 2, SelfRetiring: true, StopTimeout: 100 * time.Millisecond, Worker: worker.Options{
		Argv:        []string{"php", script},
		Env:         append(os.Environ(), "PEREGRINE_PROTOCOL=3", "SLOW_EXIT_MS=1500", "EXIT_MARK_DIR="+marks),
		BootTimeout: 30 * time.Second,
	}})
	old := map[int]bool{}
	for _, w := range p.Workers() {
		old[w.PID] = true
	}
	reset := make(chan error, 1)
	go func() { reset <- p.Reset(context.Background()) }()
	waitFor(t, "every slot serves a new worker", func() bool {
		n := 0
		for _, w := range p.Workers() {
			if w.State == StateReady && !old[w.PID] {
				n++
			}
		}
		return n == 2
	})
	// Both old workers are still draining: the second slot was not replaced after the first
	// one's exit.
	draining := 0
	for _, w := range p.Workers() {
		if w.State == StateDraining && old[w.PID] {
			draining++
		}
	}
	if draining != 2 {
		t.Errorf("old workers draining once every slot has a new one: %d, want 2 (%+v)", draining, p.Workers())
	}
	if err := <-reset; err != nil {
		t.Fatal(err)
	}
	for pid := range old {
		if _, err := os.Stat(filepath.Join(marks, strconv.Itoa(pid))); err != nil {
			t.Errorf("old worker %d did not drain to its end (killed at stop_timeout?): %v", pid, err)
		}
	}
	for _, w := range p.Workers() {
		if old[w.PID] || w.State != StateReady {
			t.Errorf("after the reset: %+v", w)
		}
	}
}

// TestResetCutsAnEarlierResetsDrains (a review's finding): old workers that drain for long (a
// client trickling an upload) hold back the reset that made them, not the next one: it gives
// them stop_timeout, then kills them, and replaces the workers. Before, it waited for the
// drains to end, however long.
func TestResetCutsAnEarlierResetsDrains(t *testing.T) {
	script, err := filepath.Abs("../../testdata/workers/slow-exit.php")
	if err != nil {
		t.Fatal(err)
	}
	p := startPool(t, Options{Size: 2, SelfRetiring: true, StopTimeout: 300 * time.Millisecond, Worker: worker.Options{
		Argv:        []string{"php", script},
		Env:         append(os.Environ(), "PEREGRINE_PROTOCOL=3", "SLOW_EXIT_MS=600000", "EXIT_MARK_DIR="+t.TempDir()),
		BootTimeout: 30 * time.Second,
	}})
	first := map[int]bool{}
	for _, w := range p.Workers() {
		first[w.PID] = true
	}
	reset := make(chan error, 1)
	go func() { reset <- p.Reset(context.Background()) }()
	waitFor(t, "both first workers draining", func() bool {
		n := 0
		for _, w := range p.Workers() {
			if w.State == StateDraining && first[w.PID] {
				n++
			}
		}
		return n == 2
	})
	second := map[int]bool{}
	for _, w := range p.Workers() {
		if !first[w.PID] {
			second[w.PID] = true
		}
	}
	go func() { _ = p.Reset(context.Background()) }() // returns once its own drains (ten minutes) end: at Stop
	waitFor(t, "the second reset's workers serving, the first's gone", func() bool {
		n := 0
		for _, w := range p.Workers() {
			if first[w.PID] {
				return false
			}
			if w.State == StateReady && !second[w.PID] {
				n++
			}
		}
		return n == 2
	})
	if err := <-reset; err != nil {
		t.Errorf("the first reset, whose drains the second cut: %v", err)
	}
	for pid := range first {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("old worker %d still runs: %v", pid, err)
		}
	}
}

// TestStopEndsDrainsAtItsBudget: an old worker still draining after a direct-mode reset is
// killed when Stop's budget ends, as the slots' workers are; Stop does not wait for its drain.
func TestStopEndsDrainsAtItsBudget(t *testing.T) {
	script, err := filepath.Abs("../../testdata/workers/slow-exit.php")
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Size: 1, SelfRetiring: true, Worker: worker.Options{
		Argv:        []string{"php", script},
		Env:         append(os.Environ(), "PEREGRINE_PROTOCOL=3", "SLOW_EXIT_MS=60000", "EXIT_MARK_DIR="+t.TempDir()),
		BootTimeout: 30 * time.Second,
	}})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	old := p.Workers()[0].PID
	ctx, cancel := context.WithCancel(context.Background())
	reset := make(chan error, 1)
	go func() { reset <- p.Reset(ctx) }()
	waitFor(t, "the old worker drains", func() bool {
		ws := p.Workers()
		return len(ws) == 2 && ws[1].PID == old && ws[1].State == StateDraining
	})
	cancel()
	if err := <-reset; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reset whose ctx ended while a worker drained: %v", err)
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stopCancel()
	stopped := make(chan struct{})
	go func() { p.Stop(stopCtx); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("Stop waited for the drain past its budget")
	}
	if err := syscall.Kill(old, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the draining worker %d outlived Stop: %v", old, err)
	}
}
