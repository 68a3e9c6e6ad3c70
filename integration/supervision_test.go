package integration

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func pidOf(t *testing.T, s *server) int {
	t.Helper()
	r := get(t, s.URL+"/pid")
	pid, err := strconv.Atoi(string(r.Body))
	if r.Status != 200 || err != nil {
		t.Fatalf("/pid: %d %q", r.Status, r.Body)
	}
	return pid
}

func TestWorkerFailuresGet502AndAreReplaced(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, logWant string
	}{
		{"exit in mid-request", "/crash", `exit code 3`},
		{"garbage on the protocol pipe", "/garbage", `this is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startApp(t, "")
			if r := get(t, s.URL+tt.path); r.Status != http.StatusBadGateway {
				t.Fatalf("status %d, want 502: %s", r.Status, r.Body)
			}
			s.log.waitFor(t, tt.logWant, 5*time.Second)
			s.log.waitFor(t, `worker started`, 5*time.Second)
			for range 10 {
				pidOf(t, s) // the pool serves again, on two workers
			}
		})
	}
}

// TestFatalErrorGets500AndTheWorkerIsReplaced: a fatal error in a request (here memory
// exhaustion) is answered 500 as PHP-FPM answers it, on the cli runtime as on the native one, and
// the worker that died of it is replaced.
func TestFatalErrorGets500AndTheWorkerIsReplaced(t *testing.T) {
	t.Parallel()
	s := startApp(t, "")
	if r := get(t, s.URL+"/fatal"); r.Status != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500: %s", r.Status, r.Body)
	}
	s.log.waitFor(t, `Allowed memory size of \d+ bytes exhausted`, 5*time.Second)
	s.log.waitFor(t, `worker started`, 5*time.Second)
	for range 10 {
		pidOf(t, s) // the pool serves again, on two workers
	}
}

func TestKilledWorkerIsReplaced(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n")
	pid := pidOf(t, s)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.log.waitFor(t, `killed by signal killed`, 5*time.Second)
	eventually(t, 5*time.Second, "a new worker", func() bool { return pidOf(t, s) != pid })
}

func TestMaxJobsRecyclesWorker(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n  max_jobs: 3\n")
	first := pidOf(t, s)
	for i := 2; i <= 3; i++ {
		if pid := pidOf(t, s); pid != first {
			t.Fatalf("request %d ran on %d: worker replaced before max_jobs", i, pid)
		}
	}
	if next := pidOf(t, s); next == first {
		t.Fatalf("worker %d still serving after max_jobs=3", first)
	}
	s.log.waitFor(t, `max_jobs`, 5*time.Second)
}

func TestMaxMemoryRecyclesLeakingWorker(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n  max_memory: 64MiB\n")
	first := pidOf(t, s)
	recycled := false
	for i := 0; i < 20 && !recycled; i++ {
		r := get(t, s.URL+"/leak")
		if r.Status != 200 {
			t.Fatalf("leak request %d: %d", i, r.Status)
		}
		recycled = pidOf(t, s) != first
	}
	if !recycled {
		t.Fatal("a worker leaking 10 MB per request was never recycled under max_memory 64MiB")
	}
	s.log.waitFor(t, `max_memory`, 5*time.Second)
}

func TestExecTimeoutKillsWorkerWith504(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n  exec_timeout: 300ms\n")
	if r := get(t, s.URL+"/hang"); r.Status != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", r.Status)
	}
	s.log.waitFor(t, `exec_timeout`, 5*time.Second)
	pidOf(t, s)
}

func TestBootFailureExits1WithPHPError(t *testing.T) {
	t.Parallel()
	tests := []struct{ script, want string }{
		{"boot-syntax-error.php", `PHP Parse error`},
		{"boot-exit.php", `database unreachable`},
		{"does-not-exist.php", `Could not open input file`},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			t.Parallel()
			script := filepath.Join("..", "testdata", "workers", tt.script)
			abs, _ := filepath.Abs(script)
			s := launch(t, "workers:\n  command: php "+abs+"\n  count: 2\n")
			if code := s.wait(t, 30*time.Second); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
			s.log.waitFor(t, tt.want, time.Second)
		})
	}
}

func TestCrashLoopBacksOffAndRecovers(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "broken")
	s := startServer(t, "workers:\n  command: php "+fixture(t, "boot-flaky.php")+"\n  count: 1\n  env: { FLAKY_MARKER: "+marker+" }\n")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := get(t, s.URL+"/crash"); r.Status != http.StatusBadGateway {
		t.Fatalf("status %d", r.Status)
	}
	s.log.waitFor(t, `worker failed to start.*"attempt":3`, 10*time.Second)
	var delays []time.Duration
	for _, m := range regexp.MustCompile(`"retry_in":"([^"]+)"`).FindAllStringSubmatch(s.log.String(), -1) {
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatal(err)
		}
		delays = append(delays, d)
	}
	for i := 1; i < len(delays); i++ {
		if delays[i] != 2*delays[i-1] {
			t.Errorf("backoff delays %v do not double", delays)
		}
	}
	if n := s.log.count(`boot failure injected by marker`); n < 3 {
		t.Errorf("PHP's error appears %d times; want one per attempt", n)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "recovery", func() bool {
		r, err := doErr(context.Background(), "GET", s.URL+"/", nil)
		return err == nil && r.Status == 200
	})
}

func TestStrayOutputGoesToTheLog(t *testing.T) {
	t.Parallel()
	s := startApp(t, "")
	r := get(t, s.URL+"/print")
	if r.Status != 200 || string(r.Body) != "printed" {
		t.Fatalf("%d %q", r.Status, r.Body)
	}
	line := s.log.waitFor(t, `.*stray stdout line from the app.*`, 5*time.Second)
	if !strings.Contains(line, `"pid":`) {
		t.Errorf("worker output not tagged with its pid: %s", line)
	}
	s.log.waitFor(t, `stray stderr line from the app`, 5*time.Second)
	s.log.waitFor(t, `dumped`, 5*time.Second)
}

// TestOverloadGets503WithRetryAfter: with its one worker busy, a request past max_queue, or
// one that waits longer than allocate_timeout, gets 503 with Retry-After. The busy worker is
// held by a request the test ends (hold_test.go), so the overload lasts as long as the checks.
func TestOverloadGets503WithRetryAfter(t *testing.T) {
	t.Parallel()
	overloaded := func(r response) bool {
		return r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") != ""
	}
	t.Run("max_queue", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, "workers:\n  command: php "+holdWorker(t)+"\n  count: 1\n  max_queue: 1\n")
		h := newHold(t)
		// One runs, one waits, and the other finds the queue full: until the release, only
		// the refusal can come back.
		held := getAsync(s.URL + h.path())
		s.log.waitFor(t, `holding in /hold`, 30*time.Second)
		queued := make(chan outcome, 2)
		for range 2 {
			go func() { queued <- <-getAsync(s.URL + "/pid") }()
		}
		select {
		case o := <-queued:
			if o.err != nil || !overloaded(o.response) {
				t.Fatalf("past max_queue: %v, status %d retry-after %q: %s", o.err, o.Status, o.Header.Get("Retry-After"), o.Body)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("two requests wait behind a busy worker with max_queue: 1")
		}
		h.release()
		for _, c := range []<-chan outcome{held, queued} {
			if o := <-c; o.err != nil || o.Status != 200 {
				t.Errorf("a request served after the release: %v, %d %s", o.err, o.Status, o.Body)
			}
		}
	})
	t.Run("allocate_timeout", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, "workers:\n  command: php "+holdWorker(t)+"\n  count: 1\n  allocate_timeout: 200ms\n")
		h := newHold(t)
		held := getAsync(s.URL + h.path())
		s.log.waitFor(t, `holding in /hold`, 30*time.Second)
		if r := get(t, s.URL+"/pid"); !overloaded(r) {
			t.Fatalf("status %d retry-after %q", r.Status, r.Header.Get("Retry-After"))
		}
		h.release()
		if o := <-held; o.err != nil || o.Status != 200 {
			t.Errorf("the request that held the worker: %v, %d %s", o.err, o.Status, o.Body)
		}
	})
}

func TestBodyOverMaxBodySizeGets413(t *testing.T) {
	t.Parallel()
	s := startServer(t, "http:\n  max_body_size: 1KiB\nworkers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n")
	big := strings.Repeat("x", 2048)
	if r := do(t, "POST", s.URL+"/echo", strings.NewReader(big)); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("with Content-Length: %d", r.Status)
	}
	if r := do(t, "POST", s.URL+"/echo", struct{ *strings.Reader }{strings.NewReader(big)}); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: %d", r.Status)
	}
	if r := do(t, "POST", s.URL+"/echo", strings.NewReader(big[:1000])); r.Status != 200 {
		t.Errorf("under the limit: %d", r.Status)
	}
}

func TestSIGHUPReplacesWorkersWithoutErrors(t *testing.T) {
	t.Parallel()
	s := startApp(t, "")
	before := map[int]bool{pidOf(t, s): true, pidOf(t, s): true}
	ctx, cancel := context.WithCancel(context.Background())
	var ok, failed atomic.Int64
	var failures sync.Map
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r, err := doErr(context.Background(), "GET", s.URL+"/pid", nil)
				if err != nil || r.Status != 200 {
					failed.Add(1)
					failures.Store(time.Now().String(), [2]any{r.Status, err})
					continue
				}
				ok.Add(1)
			}
		}()
	}
	resetThrice(t, s) // direct_test.go
	cancel()
	wg.Wait()
	failures.Range(func(k, v any) bool { t.Errorf("failed request at %s: %v", k, v); return true })
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("%d ok, %d failed during SIGHUP", ok.Load(), failed.Load())
	}
	wantNewWorkers(t, s, before)
}

func TestSIGTERMDrainsInFlightRequests(t *testing.T) {
	t.Parallel()
	s := startApp(t, "")
	type result struct {
		r   response
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := doErr(context.Background(), "GET", s.URL+"/sleep?ms=1000", nil)
		done <- result{r, err}
	}()
	s.log.waitFor(t, `sleeping in /sleep\?ms=1000`, 10*time.Second)
	s.signal(syscall.SIGTERM)
	res := <-done
	if res.err != nil || res.r.Status != 200 || string(res.r.Body) != "slept" {
		t.Fatalf("in-flight request during SIGTERM: %v %d %q", res.err, res.r.Status, res.r.Body)
	}
	if code := s.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	if _, err := doErr(context.Background(), "GET", s.URL+"/pid", nil); err == nil {
		t.Fatal("a stopped server still answers")
	}
}

func TestClientGoneWhileQueuedNeverReachesPHP(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n")
	go get(t, s.URL+"/sleep?ms=800")
	s.log.waitFor(t, `sleeping in /sleep\?ms=800`, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := doErr(ctx, "GET", s.URL+"/served", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned request: %v", err)
	}
	r := get(t, s.URL+"/served") // runs after the sleep; the abandoned one must not have run
	fields := strings.Fields(string(r.Body))
	if len(fields) != 2 || fields[1] != "2" {
		t.Fatalf("served counter %q: the abandoned request reached PHP", r.Body)
	}
}
