package pool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
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
	script, err := filepath.Abs("../../testdata/workers/app.php")
	if err != nil {
		t.Fatal(err)
	}
	opts.Worker = worker.Options{
		Argv:        []string{"php", script},
		Env:         append(os.Environ(), "PEREGRINE_PROTOCOL=1"),
		BootTimeout: 30 * time.Second,
	}
	p := New(opts)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

func call(t *testing.T, p *Pool, ctx context.Context, path, query string) (protocol.Response, Result) {
	t.Helper()
	b, err := protocol.AppendRequest(nil, 0, &protocol.Request{Method: "GET", URI: path + "?" + query, Path: path, Query: query,
		Protocol: "HTTP/1.1", Headers: []protocol.Field{{Name: "host", Value: "test"}}})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Do(ctx, b)
	if res.Err != nil {
		return protocol.Response{}, res
	}
	resp, err := protocol.DecodeResponse(res.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return resp, res
}

func TestDo(t *testing.T) {
	p := newPool(t, Options{Size: 2})
	resp, res := call(t, p, context.Background(), "/pid", "")
	if res.Err != nil || resp.Status != 200 || string(resp.Body) != strconv.Itoa(res.PID) {
		t.Fatalf("resp %+v res %+v", resp, res)
	}
	if n := p.Ready(); n != 2 {
		t.Fatalf("Ready() = %d", n)
	}
}

// TestBatchSurvivesCrash queues many requests behind a slow one on a single worker, with one
// crash among them: exactly the crashing request fails; those batched after it are run again
// on the replacement, not lost.
func TestBatchSurvivesCrash(t *testing.T) {
	p := newPool(t, Options{Size: 1})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); call(t, p, context.Background(), "/sleep", "ms=300") }()
	for p.Waiting() != 0 || p.Workers()[0].State != StateBusy {
		time.Sleep(time.Millisecond)
	}
	const n = 12
	results := make([]Result, n)
	statuses := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/pid"
			if i == n/2 {
				path = "/crash"
			}
			resp, res := call(t, p, context.Background(), path, "")
			results[i], statuses[i] = res, resp.Status
		}()
	}
	wg.Wait()
	failed := 0
	for i, r := range results {
		switch {
		case i == n/2:
			if !errors.Is(r.Err, worker.ErrExited) {
				t.Errorf("crashing request: %v", r.Err)
			}
		case r.Err != nil || statuses[i] != 200:
			failed++
			t.Errorf("request %d: %v status %d", i, r.Err, statuses[i])
		}
	}
	if failed != 0 {
		t.Fatalf("%d innocent requests failed with the crash", failed)
	}
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
			wg.Add(1)
			go func() { defer wg.Done(); call(t, p, context.Background(), "/sleep", "ms=500") }()
			for p.Workers()[0].State != StateBusy {
				time.Sleep(time.Millisecond)
			}
			if tt.opts.MaxQueue > 0 {
				wg.Add(1)
				go func() { defer wg.Done(); call(t, p, context.Background(), "/pid", "") }()
				for p.Waiting() != 1 {
					time.Sleep(time.Millisecond)
				}
			}
			if _, res := call(t, p, context.Background(), "/pid", ""); !errors.Is(res.Err, tt.want) {
				t.Fatalf("err = %v, want %v", res.Err, tt.want)
			}
		})
	}
}

func TestCancelledWhileQueuedNeverRuns(t *testing.T) {
	p := newPool(t, Options{Size: 1})
	done := make(chan struct{})
	go func() { defer close(done); call(t, p, context.Background(), "/sleep", "ms=300") }()
	for p.Workers()[0].State != StateBusy {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for p.Waiting() != 1 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, res := call(t, p, ctx, "/served", ""); !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("err = %v", res.Err)
	}
	<-done
	resp, _ := call(t, p, context.Background(), "/served", "")
	if got := string(resp.Body); got != strconv.Itoa(p.Workers()[0].PID)+" 2" {
		t.Fatalf("served = %q: the cancelled request reached PHP", got)
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
		deadline := time.Now().Add(30 * time.Second)
		for {
			w := p.Workers()[0]
			if w.State == StateBackoff {
				t.Fatalf("kill %d: the slot backs off after its young worker was killed with SIGKILL", i+1)
			}
			if w.State == StateReady && w.PID != pid && w.PID != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: no new worker within 30s", i+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func TestBatchSizeFollowsRequestTime(t *testing.T) {
	tests := []struct {
		avg     time.Duration
		waiting int
		want    int
	}{
		{0, 40, maxBatch},                     // nothing measured yet: fair share, capped
		{20 * time.Microsecond, 40, maxBatch}, // fast requests: batch
		{2 * time.Millisecond, 40, 5},         // 5 x 2ms fit the budget
		{50 * time.Millisecond, 40, 1},        // slow requests: one at a time
		{20 * time.Microsecond, 3, 2},         // fair share of 3 among 2 workers, rounded up
	}
	for _, tt := range tests {
		p := New(Options{Size: 2})
		p.slots = make([]*slot, 2)
		p.avgExec.Store(int64(tt.avg))
		for range tt.waiting {
			j := &job{ctx: context.Background(), done: make(chan Result, 1)}
			p.queue = append(p.queue, j)
			p.waiting++
		}
		if got := len(p.takeLocked(maxBatch)); got != tt.want {
			t.Errorf("avg %s, %d waiting: batch of %d, want %d", tt.avg, tt.waiting, got, tt.want)
		}
	}
}
