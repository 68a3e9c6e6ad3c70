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

// TestConcurrentCapacity: a worker holds at most Concurrency requests; the rest wait.
func TestConcurrentCapacity(t *testing.T) {
	p := newConcurrentPool(t, Options{Size: 1, Concurrency: 4})
	var wg sync.WaitGroup
	for range 7 {
		wg.Add(1)
		go func() { defer wg.Done(); call(t, p, context.Background(), "/sleep", "ms=400") }()
	}
	waitFor(t, "4 in flight and 3 waiting", func() bool { return inFlight(p) == 4 && p.Waiting() == 3 })
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
	p := newConcurrentPool(t, Options{Size: 1, Concurrency: 8, ExecTimeout: 500 * time.Millisecond, Observer: obs})
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
	p := newConcurrentPool(t, Options{Size: 1, Concurrency: 2, Observer: obs})
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

// spread runs clients x each requests of path?query at once and counts the answers by pid.
func spread(t *testing.T, p *Pool, clients, each int, path, query string) map[int]int {
	t.Helper()
	var mu sync.Mutex
	byPID := map[int]int{}
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				r := call(t, p, context.Background(), path, query)
				if r.err != nil || r.status != 200 {
					t.Errorf("%s: %+v", path, r)
					return
				}
				mu.Lock()
				byPID[r.pid]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return byPID
}

// TestConcurrentSpreadsToTheLeastLoaded: 2 workers x 50, 40 clients: both workers get a fair
// share (one used to do all the work while the other idled: the idle list was LIFO, and a
// concurrent worker stayed at its end until full). Then one worker is stuck in a CPU loop,
// which holds every request of its process: the requests that come meanwhile go to the other
// (they used to pile up on the stuck one, 504s and 502s).
func TestConcurrentSpreadsToTheLeastLoaded(t *testing.T) {
	p := newConcurrentPool(t, Options{Size: 2, Concurrency: 50})
	byPID := spread(t, p, 40, 10, "/sleep", "ms=20")
	if len(byPID) != 2 {
		t.Fatalf("answers by pid %v: want both workers to work", byPID)
	}
	for pid, n := range byPID {
		if n < 400/4 {
			t.Fatalf("answers by pid %v: worker %d got %d of 400", byPID, pid, n)
		}
	}

	spun := make(chan result, 1)
	go func() { spun <- call(t, p, context.Background(), "/spin", "ms=5000&tag=spin") }()
	waitFor(t, "the loop in flight", func() bool { return inFlight(p) == 1 })
	// A worker counts as stalled once it sent nothing for a while (stallFloor): no timing is
	// asserted, the loop lasts far longer.
	time.Sleep(3 * stallFloor)
	byPID = spread(t, p, 40, 5, "/sleep", "ms=5")
	r := <-spun
	if r.err != nil || r.status != 200 {
		t.Fatalf("the loop: %+v", r)
	}
	if n := byPID[r.pid]; n > 200/10 {
		t.Fatalf("answers by pid %v: %d of 200 went to worker %d, stuck in a loop", byPID, n, r.pid)
	}
}
