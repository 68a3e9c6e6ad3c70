package pool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/worker"
)

// These tests run testdata/workers/interleave.php, a worker that speaks the protocol by hand and
// answers many requests at once, out of order: the daemon side of workers.concurrency.

func newConcurrentPool(t *testing.T, opts Options) *Pool {
	t.Helper()
	script, _ := filepath.Abs("../../testdata/workers/interleave.php")
	opts.Worker = worker.Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"), BootTimeout: 30 * time.Second}
	return startPool(t, opts)
}

func inFlight(p *Pool) int {
	n := 0
	for _, w := range p.Workers() {
		n += w.InFlight
	}
	return n
}

// TestConcurrentAnswersCarryTheirOwnData: many requests in flight on one worker, answered in
// random order, each answer its own request's.
func TestConcurrentAnswersCarryTheirOwnData(t *testing.T) {
	p := newConcurrentPool(t, Options{Size: 2, Concurrency: 64})
	const n = 500
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("req-%d", i)
			r := call(t, p, context.Background(), "/sleep", fmt.Sprintf("ms=%d&tag=%s", rand.IntN(30), tag))
			if r.err != nil || r.status != 200 || !strings.HasPrefix(r.body, tag+" ") {
				errs <- fmt.Errorf("%s: %+v", tag, r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConcurrentCapacity: a worker holds at most Concurrency requests; the rest wait, and run
// as capacity comes back. The requests that take the capacity last until the test cancels them:
// requests of a fixed length had to outlast the test's look at the queue.
func TestConcurrentCapacity(t *testing.T) {
	p := newConcurrentPool(t, Options{Size: 1, Concurrency: 4})
	hold, release := context.WithCancel(context.Background())
	defer release()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := call(t, p, hold, "/sleep", "ms=60000"); !errors.Is(r.err, context.Canceled) {
				t.Errorf("a request holding the worker: %+v", r)
			}
		}()
	}
	waitFor(t, "4 in flight", func() bool { return inFlight(p) == 4 })
	waited := make(chan result, 3)
	for range 3 {
		go func() { waited <- call(t, p, context.Background(), "/sleep", "tag=waited") }()
	}
	waitFor(t, "4 in flight and 3 waiting", func() bool {
		if n := inFlight(p); n > 4 || len(waited) > 0 {
			t.Fatalf("%d requests in flight on a worker of concurrency 4, %d answered", n, len(waited))
		}
		return p.Waiting() == 3
	})
	release()
	for range 3 {
		if r := <-waited; r.err != nil || r.status != 200 {
			t.Fatalf("a request that waited: %+v", r)
		}
	}
	wg.Wait()
	waitFor(t, "the worker is idle", func() bool { return inFlight(p) == 0 && p.Workers()[0].State == StateReady })
}

// TestConcurrentStreamsDoNotMix: streamed answers interleave on the pipe, each body whole.
func TestConcurrentStreamsDoNotMix(t *testing.T) {
	p := newConcurrentPool(t, Options{Size: 1, Concurrency: 32})
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("s%d", i)
			r := call(t, p, context.Background(), "/stream", fmt.Sprintf("parts=5&ms=%d&tag=%s", 1+rand.IntN(10), tag))
			want := ""
			for k := range 5 {
				want += fmt.Sprintf("%s:%d\n", tag, k)
			}
			if r.err != nil || r.body != want {
				t.Errorf("%s: %+v (%v), want %q", tag, r, r.err, want)
			}
		}()
	}
	wg.Wait()
}

// TestConcurrentKillFailsExactlyTheRequestsInFlight: kill -9 of a worker running many requests
// fails those, with 502, and nothing else.
func TestConcurrentKillFailsExactlyTheRequestsInFlight(t *testing.T) {
	obs := &counting{}
	p := newConcurrentPool(t, Options{Size: 1, Concurrency: 200, Observer: obs})
	const n = 200
	results := make(chan result, n)
	for range n {
		go func() { results <- call(t, p, context.Background(), "/sleep", "ms=60000") }()
	}
	waitFor(t, "every request in flight", func() bool { return inFlight(p) == n })
	if err := syscall.Kill(p.Workers()[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range n {
		if r := <-results; statusOf(r.err) != http.StatusBadGateway || !errors.Is(r.err, worker.ErrExited) {
			t.Fatalf("a request in flight: %+v", r)
		}
	}
	if r := call(t, p, context.Background(), "/sleep", "tag=after"); r.err != nil || r.status != 200 {
		t.Fatalf("after the kill: %+v", r)
	}
	if got := obs.replaced.Load(); got != 1 {
		t.Errorf("%d workers replaced, want 1", got)
	}
}

// TestConcurrentExecTimeoutFailsOneRequest: a request past exec_timeout is cancelled and gets
// 504; the others on its worker go on, and the worker stays.
func TestConcurrentExecTimeoutFailsOneRequest(t *testing.T) {
	obs := &counting{}
	// exec_timeout bounds the requests beside the slow one too: long enough for them on a
	// loaded machine.
	p := newConcurrentPool(t, Options{Size: 1, Concurrency: 8, ExecTimeout: 3 * time.Second, CancelGrace: 10 * time.Second, Observer: obs})
	slow := make(chan result, 1)
	go func() { slow <- call(t, p, context.Background(), "/sleep", "ms=60000&tag=slow") }()
	waitFor(t, "the slow request in flight", func() bool { return inFlight(p) == 1 })
	for i := range 5 {
		if r := call(t, p, context.Background(), "/sleep", fmt.Sprintf("ms=10&tag=%d", i)); r.err != nil || r.status != 200 {
			t.Fatalf("request %d beside the slow one: %+v", i, r)
		}
	}
	if r := <-slow; statusOf(r.err) != http.StatusGatewayTimeout || !errors.Is(r.err, worker.ErrCancelled) {
		t.Fatalf("the slow request: %+v, want 504, cancelled with its worker kept", r)
	}
	waitFor(t, "the cancelled request ended", func() bool { return inFlight(p) == 0 })
	if got := obs.replaced.Load(); got != 0 {
		t.Errorf("%d workers replaced; a cancelled request that ends costs none", got)
	}
}

// TestConcurrentBlockedWorkerIsKilled: a request that ignores its CANCEL blocks the worker: the
// worker is killed after the grace, its other requests fail, the next ones are served.
func TestConcurrentBlockedWorkerIsKilled(t *testing.T) {
	obs := &counting{}
	p := newConcurrentPool(t, Options{Size: 1, Concurrency: 8, ExecTimeout: 300 * time.Millisecond, Observer: obs})
	if r := call(t, p, context.Background(), "/hang", ""); statusOf(r.err) != http.StatusGatewayTimeout {
		t.Fatalf("the blocking request: %+v", r)
	}
	waitFor(t, "the worker replaced", func() bool { return obs.replaced.Load() == 1 })
	if r := call(t, p, context.Background(), "/sleep", "tag=after"); r.err != nil || r.status != 200 {
		t.Fatalf("after: %+v", r)
	}
}

// TestConcurrentExitSendsTheRestElsewhere: a worker that says it exits (DONE with LAST) gets
// nothing more; what waits runs on its replacement.
func TestConcurrentExitSendsTheRestElsewhere(t *testing.T) {
	p := newConcurrentPool(t, Options{Size: 1, Concurrency: 4})
	first := call(t, p, context.Background(), "/exit", "")
	if first.err != nil || first.status != 200 {
		t.Fatalf("exit: %+v", first)
	}
	for i := range 10 {
		if r := call(t, p, context.Background(), "/sleep", "tag=x"); r.err != nil || r.status != 200 || r.pid == first.pid {
			t.Fatalf("request %d after the exit: %+v (exited pid %d)", i, r, first.pid)
		}
	}
}

// TestConcurrentResetFailsNone: Reset under concurrent load drains each worker (no new
// requests, the running ones finish) and fails nothing.
func TestConcurrentResetFailsNone(t *testing.T) {
	p := newConcurrentPool(t, Options{Size: 2, Concurrency: 16, StopTimeout: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	served := 0
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r := call(t, p, context.Background(), "/sleep", fmt.Sprintf("ms=%d&tag=t", rand.IntN(50)))
				mu.Lock()
				served++
				if r.err != nil || r.status != 200 {
					failures = append(failures, fmt.Sprintf("%+v", r))
				}
				mu.Unlock()
			}
		}()
	}
	waitFor(t, "load", func() bool { mu.Lock(); defer mu.Unlock(); return served > 100 })
	before := p.Workers()
	if err := p.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed across the reset: %v", len(failures), served, failures[0])
	}
	for i, w := range p.Workers() {
		if w.PID == before[i].PID {
			t.Errorf("worker %d not replaced", w.Slot)
		}
	}
}

// TestConcurrentClientLeavingCancelsItsRequest: a client that leaves gets its own context's
// error (not a worker failure), the worker is told to cancel, and the request's capacity comes
// back.
func TestConcurrentClientLeavingCancelsItsRequest(t *testing.T) {
	obs := &counting{}
	// A cancel that takes PHP longer than the default grace on a loaded machine would cost
	// the worker: the test is of the cancel, not of the grace.
	p := newConcurrentPool(t, Options{Size: 1, Concurrency: 2, CancelGrace: 10 * time.Second, Observer: obs})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() { done <- call(t, p, ctx, "/sleep", "ms=60000") }()
	waitFor(t, "the request in flight", func() bool { return inFlight(p) == 1 })
	cancel()
	if r := <-done; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the request whose client left: %+v", r)
	}
	waitFor(t, "its capacity back", func() bool { return inFlight(p) == 0 })
	if got := obs.replaced.Load(); got != 0 {
		t.Errorf("%d workers replaced; a cancelled request that ends costs none", got)
	}
}

// TestConcurrentFatalErrorIsNotAProtocolViolation: a worker that dies of a fatal error says
// DONE with LAST as its last word: for no running request (/die), or naming the request whose
// fiber hit it (/fatal, what the PHP library says), which then gets 500. Its other requests in
// flight fail with 502 (the process is gone), and the worker is replaced for its exit, not for a
// protocol violation.
func TestConcurrentFatalErrorIsNotAProtocolViolation(t *testing.T) {
	for _, tc := range []struct {
		path string
		want int // the dying request's status
	}{
		{"/die", http.StatusBadGateway},
		{"/fatal", http.StatusInternalServerError},
	} {
		t.Run(tc.path, func(t *testing.T) {
			p := newConcurrentPool(t, Options{Size: 1, Concurrency: 8})
			inflight := make(chan result, 3)
			for range 3 {
				go func() { inflight <- call(t, p, context.Background(), "/sleep", "ms=60000") }()
			}
			waitFor(t, "3 in flight", func() bool { return inFlight(p) == 3 })
			if r := call(t, p, context.Background(), tc.path, ""); statusOf(r.err) != tc.want || errors.Is(r.err, worker.ErrProtocol) {
				t.Fatalf("the dying request: %+v, want %d", r, tc.want)
			}
			for range 3 {
				if r := <-inflight; statusOf(r.err) != http.StatusBadGateway || errors.Is(r.err, worker.ErrProtocol) {
					t.Fatalf("a request in flight on the dead worker: %v", r.err)
				}
			}
			if r := call(t, p, context.Background(), "/sleep", "tag=after"); r.err != nil || r.status != 200 {
				t.Fatalf("after: %+v", r)
			}
		})
	}
}

// TestConcurrentSpreadsToTheLeastLoaded: 40 requests held at once on 2 workers x 50 go 20 to
// each (one used to do all the work while the other idled: the idle list was LIFO, and a
// concurrent worker stayed at its end until full). Then one worker is stuck in a CPU loop,
// which holds every request of its process: the requests that come meanwhile go to the other
// (they used to pile up on the stuck one, 504s and 502s).
func TestConcurrentSpreadsToTheLeastLoaded(t *testing.T) {
	p := newConcurrentPool(t, Options{Size: 2, Concurrency: 50})
	// No worker counts as stalled in this half (pickLocked's bar is four times the average
	// request time, and no request is answered to move it): the load alone decides.
	p.avgExec.Store(int64(time.Hour))
	hold, release := context.WithCancel(context.Background())
	defer release()
	var held sync.WaitGroup
	for range 40 {
		held.Add(1)
		go func() { defer held.Done(); call(t, p, hold, "/sleep", "ms=60000") }()
	}
	waitFor(t, "40 requests in flight", func() bool { return inFlight(p) == 40 })
	for _, w := range p.Workers() {
		if w.InFlight != 20 {
			t.Fatalf("requests in flight by worker: %+v, want 20 each", p.Workers())
		}
	}
	release()
	held.Wait()
	waitFor(t, "the held requests ended", func() bool { return inFlight(p) == 0 })

	// The loop lasts until the test kills its worker, so that every request below comes while
	// it runs. The requests take about requestTime, which the pool is told it measured: a
	// worker counts as stalled once it sent nothing for four times the average request time.
	// The loop runs far longer than that before they come, since a machine that holds up the
	// other worker's PHP for a moment raises that average as much meanwhile (its requests all
	// take that moment longer), and the loop's worker must still count as stalled after it.
	const requestTime = 50 * time.Millisecond
	p.avgExec.Store(int64(requestTime))
	spun := make(chan result, 1)
	go func() { spun <- call(t, p, context.Background(), "/spin", "ms=600000&tag=spin") }()
	var stuck WorkerInfo
	waitFor(t, "the loop in flight", func() bool {
		for _, w := range p.Workers() {
			if w.InFlight == 1 {
				stuck = w
				return true
			}
		}
		return false
	})
	time.Sleep(60 * requestTime)

	const clients, answers, most = 40, 200, 4
	var answered atomic.Int32
	var stop atomic.Bool
	failed := make(chan result, clients)
	var load sync.WaitGroup
	for range clients {
		load.Add(1)
		go func() {
			defer load.Done()
			for !stop.Load() {
				r := call(t, p, context.Background(), "/sleep", fmt.Sprintf("ms=%d", requestTime/time.Millisecond))
				if r.err != nil || r.status != 200 {
					failed <- r // on the stuck worker, killed below, this client waits until then
					return
				}
				answered.Add(1)
			}
		}()
	}
	onStuck := func() int { // requests on the stuck worker besides the loop
		for _, w := range p.Workers() {
			if w.PID == stuck.PID {
				return w.InFlight - 1
			}
		}
		return 0
	}
	waitFor(t, "answers while the loop runs", func() bool { return answered.Load() >= answers || onStuck() > most })
	stop.Store(true)
	if err := syscall.Kill(stuck.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	load.Wait()
	close(failed)
	if r := <-spun; statusOf(r.err) != http.StatusBadGateway {
		t.Errorf("the loop: %+v, want 502 when its worker is killed", r)
	}
	sent := 0
	for r := range failed {
		if r.pid != stuck.PID || statusOf(r.err) != http.StatusBadGateway {
			t.Errorf("a request beside the loop: %+v", r)
			continue
		}
		sent++
	}
	if sent > most {
		t.Fatalf("%d requests went to worker %d, stuck in a loop, while the other answered %d", sent, stuck.PID, answered.Load())
	}
}
