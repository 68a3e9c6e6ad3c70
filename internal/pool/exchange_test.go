package pool

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// These tests run the native runtime on testdata/workers/exchange.php: what becomes of each
// request is what the worker says of it (worker.Outcome), for every way a request can end.

func newNativePool(t *testing.T, opts Options, script string, env ...string) *Pool {
	t.Helper()
	native, _ := filepath.Abs(filepath.Join("..", "..", "bin", worker.NativeProgram))
	if _, err := os.Stat(native); err != nil {
		t.Skipf("the native runtime is not built (make native): %v", err)
	}
	path, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", script))
	opts.Worker = worker.Options{
		Argv:        []string{native, path},
		Env:         append(append(os.Environ(), "PEREGRINE_PROTOCOL=3"), env...),
		BootTimeout: 30 * time.Second,
	}
	return startPool(t, opts)
}

// put sends a PUT whose body of size bytes goes from a reader, as the HTTP server sends a body
// it spilled to disk.
func put(t *testing.T, p *Pool, path string, size int) result {
	t.Helper()
	head, err := protocol.AppendRequestHead(nil, 0, &protocol.Request{Method: "PUT", URI: path, Path: path, Protocol: "HTTP/1.1",
		Headers: []protocol.Field{{Name: "host", Value: "test"}, {Name: "content-type", Value: "application/octet-stream"}}}, int64(size))
	if err != nil {
		t.Fatal(err)
	}
	a := &answer{}
	pid, err := p.Do(context.Background(), &worker.Call{Frame: head, Body: bytes.NewReader(make([]byte, size)), Answer: a})
	return result{status: a.status, body: string(a.body), pid: pid, err: err}
}

// TestFatalWithAnUnreadBodyKeepsItsAnswer: PHP answers 500 to a fatal error without reading a
// body larger than the pipe, then exits. The client gets PHP's 500 (it once got a panic), the
// worker is replaced, and the pool serves and stops.
func TestFatalWithAnUnreadBodyKeepsItsAnswer(t *testing.T) {
	for _, size := range []int{worker.PipeBuffer - 100, worker.PipeBuffer, worker.PipeBuffer + 1, 1 << 20} {
		obs := &counting{}
		p := newNativePool(t, Options{Size: 1, Observer: obs}, "exchange.php")
		if r := put(t, p, "/fatal", size); r.err != nil || r.status != http.StatusInternalServerError {
			t.Fatalf("body of %d bytes: %+v", size, r)
		}
		if r := call(t, p, context.Background(), "/pid", ""); r.err != nil || r.status != 200 {
			t.Fatalf("after it: %+v", r)
		}
		if got := obs.replaced.Load(); got != 1 {
			t.Fatalf("%d workers replaced, want 1", got)
		}
	}
}

// TestABatchBehindAFatalErrorIsNotFailed: requests batched behind one that ends its worker with a
// fatal error were never read; they run on the replacement instead of getting 502.
func TestABatchBehindAFatalErrorIsNotFailed(t *testing.T) {
	obs := &counting{}
	p := newNativePool(t, Options{Size: 1, Observer: obs}, "exchange.php")
	p.budget = time.Hour
	var wg sync.WaitGroup
	release := occupy(t, p, &wg)
	const n = 10
	results := batchBehind(t, p, &wg, release, obs, n, func(i int) string {
		if i == 2 {
			return "/fatal"
		}
		return "/pid"
	})
	for i, r := range results {
		want := http.StatusOK
		if i == 2 {
			want = http.StatusInternalServerError
		}
		if r.err != nil || r.status != want {
			t.Errorf("request %d: %+v, want %d", i, r, want)
		}
	}
	if got := obs.replaced.Load(); got != 1 {
		t.Errorf("%d workers replaced; the fatal error must cost one", got)
	}
}

// TestAScriptLeavingItsLoopLosesNothing: a worker script that ends after one request; the
// requests batched behind it are unread and run on its replacements.
func TestAScriptLeavingItsLoopLosesNothing(t *testing.T) {
	obs := &counting{}
	p := newNativePool(t, Options{Size: 1, Observer: obs}, "exchange-loop.php")
	p.budget = time.Hour
	var wg sync.WaitGroup
	const n = 6
	results := make([]result, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = call(t, p, context.Background(), "/pid", "") }()
	}
	wg.Wait()
	pids := map[string]bool{}
	for i, r := range results {
		if r.err != nil || r.status != 200 {
			t.Fatalf("request %d: %+v", i, r)
		}
		pids[r.body] = true
	}
	if len(pids) != n {
		t.Errorf("%d requests answered by %d workers; each worker serves one", n, len(pids))
	}
}

// TestWorkAfterTheAnswerKeepsTheWorker: after fastcgi_finish_request() the client has its
// answer, but the worker gets no other request until PHP is done; when that work passes
// exec_timeout its worker is killed, and the next request, which waited, runs on the
// replacement instead of getting 504.
func TestWorkAfterTheAnswerKeepsTheWorker(t *testing.T) {
	obs := &counting{}
	p := newNativePool(t, Options{Size: 1, ExecTimeout: time.Second, Observer: obs}, "exchange.php")
	if r := call(t, p, context.Background(), "/finish", "ms=3000"); r.err != nil || r.status != 200 || r.body != "answered" {
		t.Fatalf("finish: %+v", r)
	}
	if st := p.Workers()[0].State; st != StateBusy && st != StateStopping && st != StateStarting {
		t.Fatalf("the worker is %s while PHP works after its answer", st)
	}
	r := call(t, p, context.Background(), "/pid", "")
	if r.err != nil || r.status != 200 {
		t.Fatalf("the next request: %+v (status %d)", r, statusOf(r.err))
	}
	if got := obs.replaced.Load(); got != 1 {
		t.Errorf("%d workers replaced; the work past exec_timeout must cost its worker", got)
	}
}

// TestFatalDoesNotFailTheNextClients: after a fatal error, requests sent right after it on one
// and two workers all succeed (item 7 of the outside testing: 20 of 20 got 502).
func TestFatalDoesNotFailTheNextClients(t *testing.T) {
	for _, size := range []int{1, 2} {
		p := newNativePool(t, Options{Size: size}, "exchange.php")
		var wg sync.WaitGroup
		errs := make(chan error, 21)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := call(t, p, context.Background(), "/fatal", ""); r.status != 500 {
				errs <- errors.New("the fatal request did not get 500")
			}
		}()
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r := call(t, p, context.Background(), "/pid", ""); r.err != nil || r.status != 200 {
					errs <- r.err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("%d workers: %v", size, err)
		}
	}
}

// TestEveryWorkerFailingAnswers503AtOnce: while no worker can boot, a request
// gets 503 at once instead of waiting allocate_timeout; once a worker boots again, it serves.
func TestEveryWorkerFailingAnswers503AtOnce(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "broken")
	script, _ := filepath.Abs("../../testdata/workers/boot-flaky.php")
	p := startPool(t, Options{Size: 1, AllocateTimeout: time.Hour, Worker: worker.Options{
		Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3", "FLAKY_MARKER="+marker),
		BootTimeout: 30 * time.Second}})
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := call(t, p, context.Background(), "/crash", ""); statusOf(r.err) != http.StatusBadGateway {
		t.Fatalf("crash: %+v", r)
	}
	waitFor(t, "a boot failed", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.slots[0].failing })
	r := call(t, p, context.Background(), "/", "")
	var pe *Error
	if !errors.As(r.err, &pe) || pe.Status != http.StatusServiceUnavailable || !pe.RetryAfter || !errors.Is(r.err, ErrNoWorker) {
		t.Fatalf("while every worker fails: %+v", r)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker is back", func() bool { return p.Ready() == 1 })
	if r := call(t, p, context.Background(), "/", ""); r.err != nil || r.status != 200 {
		t.Fatalf("after the fix: %+v", r)
	}
}
