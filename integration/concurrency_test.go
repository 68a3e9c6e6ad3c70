package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestConcurrentWorkerThroughTheServer: one worker with workers.concurrency: 100 holds many
// requests at once through the real server, each answered with its own data (the worker,
// testdata/workers/interleave.php, answers out of order). Each sleeps 15 s, so that all are
// seen in flight at once however long sending 100 takes.
func TestConcurrentWorkerThroughTheServer(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	s := startServer(t, "workers:\n  command: php "+fixture(t, "interleave.php")+"\n  count: 1\n  concurrency: 100\nadmin:\n  address: "+addr+"\n")
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("r%d", i)
			r, err := doErr(context.Background(), "GET", s.URL+"/sleep?ms=15000&tag="+tag, nil)
			if err != nil || r.Status != 200 || !strings.HasPrefix(string(r.Body), tag+" ") {
				errs <- fmt.Sprintf("%s: %v %d %q", tag, err, r.Status, r.Body)
			}
		}()
	}
	eventually(t, 30*time.Second, "every request in flight on the one worker", func() bool {
		var ws []struct {
			InFlight int `json:"in_flight"`
		}
		r := get(t, "http://"+addr+"/workers")
		return json.Unmarshal(r.Body, &ws) == nil && len(ws) == 1 && ws[0].InFlight == n
	})
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestConcurrencyRefusedWhereItCannotRun: classic mode and serveGlobals(), whose request state is
// the process's, refuse workers.concurrency above 1 at start, naming the key.
func TestConcurrencyRefusedWhereItCannotRun(t *testing.T) {
	t.Parallel()
	for name, yaml := range map[string]string{
		"classic mode":   "http:\n  root: " + t.TempDir() + "\nworkers:\n  runtime: native\n  concurrency: 4\n",
		"serveGlobals()": "workers:\n  command: php " + fixture(t, "globals.php") + "\n  count: 1\n  concurrency: 4\n",
	} {
		s := launch(t, yaml)
		if code := s.wait(t, 30*time.Second); code != 1 || !strings.Contains(s.log.String(), "workers.concurrency") {
			t.Errorf("%s with concurrency 4: exit %d, log:\n%s", name, code, s.log.String())
		}
	}
}

// startConcurrent serves testdata/workers/concurrent.php on the native runtime with the given
// count and concurrency, and an admin listener whose address it returns.
func startConcurrent(t *testing.T, count, concurrency int, extra string) (*server, string) {
	t.Helper()
	return startConcurrentOn(t, "native", count, concurrency, extra)
}

// startConcurrentOn is startConcurrent on the given runtime (cli or native).
func startConcurrentOn(t *testing.T, runtime string, count, concurrency int, extra string) (*server, string) {
	t.Helper()
	addr := freeAddr(t)
	s := startServer(t, fmt.Sprintf("workers:\n  runtime: %s\n  command: php %s\n  count: %d\n  concurrency: %d\n%sadmin:\n  address: %s\n",
		runtime, fixture(t, "concurrent.php"), count, concurrency, extra, addr))
	return s, "http://" + addr
}

// onBothRuntimes runs test in parallel subtests on the cli and the native runtime, each against
// a server of its own with one concurrent worker (concurrent.php) holding up to concurrency
// requests.
func onBothRuntimes(t *testing.T, concurrency int, test func(t *testing.T, s *server, admin string)) {
	t.Helper()
	t.Parallel()
	for _, runtime := range []string{"cli", "native"} {
		t.Run(runtime, func(t *testing.T) {
			t.Parallel()
			s, admin := startConcurrentOn(t, runtime, 1, concurrency, "")
			test(t, s, admin)
		})
	}
}

// TestConcurrentFatalErrorFailsItsRequestWith500: a fatal error (memory_limit) in one request's
// fiber ends its worker's process, with other requests sleeping in it. The worker names that
// request as it dies: it gets 500, as under PHP-FPM, and the server's log names it; the others
// in flight were lost with the process and get 502; the replacement serves on.
func TestConcurrentFatalErrorFailsItsRequestWith500(t *testing.T) {
	onBothRuntimes(t, 16, func(t *testing.T, s *server, admin string) {
		results := sleepers(s, 3)
		eventually(t, 30*time.Second, "3 requests in flight", func() bool {
			_, n := workersInFlight(t, admin)
			return n == 3
		})
		if r := get(t, s.URL+"/fatal?ms=20"); r.Status != 500 {
			t.Fatalf("the request that hit the fatal error: %d %s, want 500", r.Status, r.Body)
		}
		s.log.waitFor(t, `a request hit a fatal error in PHP[^\n]*/fatal`, 10*time.Second)
		for range 3 {
			if st := <-results; st != 502 {
				t.Fatalf("a request in flight beside it got %d, want 502; log:\n%s", st, s.log.String())
			}
		}
		if n := s.log.count(`a request hit a fatal error in PHP`); n != 1 {
			t.Fatalf("%d fatal error lines, want 1 (only the request that hit it); log:\n%s", n, s.log.String())
		}
		if r := get(t, s.URL+"/sleep?ms=1&tag=after"); r.Status != 200 {
			t.Fatalf("after the fatal error: %d %s", r.Status, r.Body)
		}
	})
}

// TestConcurrentSessionStartFailsItsRequest: session_start() in a concurrent worker fails its
// request (500) with an error naming workers.concurrency, rather than share PHP's one session
// between the requests in flight; the worker serves on.
func TestConcurrentSessionStartFailsItsRequest(t *testing.T) {
	onBothRuntimes(t, 8, func(t *testing.T, s *server, _ string) {
		if r := get(t, s.URL+"/session"); r.Status != 500 {
			t.Fatalf("session_start(): %d %s, want 500", r.Status, r.Body)
		}
		s.log.waitFor(t, `session_start\(\) in a concurrent worker \(workers.concurrency is 8\)`, 10*time.Second)
		if r := get(t, s.URL+"/sleep?ms=1&tag=after"); r.Status != 200 {
			t.Fatalf("after: %d %s", r.Status, r.Body)
		}
	})
}

// TestConcurrentEarlyHints: Peregrine\Http\earlyHints() in a concurrent worker sends a 103 to
// the request whose fiber calls it. Two requests in flight in one worker each send a hint, wait
// until both have, and send another: each client gets its own two links in 103s, none of the
// other's, then its 200.
func TestConcurrentEarlyHints(t *testing.T) {
	onBothRuntimes(t, 8, func(t *testing.T, s *server, _ string) {
		tags := []string{"a", "b"}
		raws := make([]string, len(tags))
		var wg sync.WaitGroup
		for i, tag := range tags {
			wg.Add(1)
			go func() {
				defer wg.Done()
				raws[i] = rawExchange(t, s.URL, "/hints?n=2&tag="+tag, "HTTP/1.1")
			}()
		}
		wg.Wait()
		for i, tag := range tags {
			heads, body := splitHeads(raws[i])
			if len(heads) < 2 || !strings.HasPrefix(heads[len(heads)-1], "HTTP/1.1 200 OK\r\n") || body != tag {
				t.Fatalf("%s: heads %q, body %q: want 103s then a 200", tag, heads, body)
			}
			hints := strings.Join(heads[:len(heads)-1], "\r\n")
			for _, h := range heads[:len(heads)-1] {
				if !strings.HasPrefix(h, "HTTP/1.1 103 Early Hints\r\n") {
					t.Fatalf("%s: %q, want 103 Early Hints", tag, h)
				}
			}
			other := tags[1-i]
			if !strings.Contains(hints, "</"+tag+"-1.css>") || !strings.Contains(hints, "</"+tag+"-2.css>") || strings.Contains(hints, "</"+other+"-") {
				t.Fatalf("%s: the 103s carry %q, want its own two links and none of %s's", tag, hints, other)
			}
		}
	})
}

// sleepers sends n requests that sleep for a minute and returns where their statuses come (-1
// for a request that failed in the client).
func sleepers(s *server, n int) <-chan int {
	results := make(chan int, n)
	for range n {
		go func() {
			r, err := doErr(context.Background(), "GET", s.URL+"/sleep?ms=60000", nil)
			if err != nil {
				results <- -1
				return
			}
			results <- r.Status
		}()
	}
	return results
}

// workersInFlight reads the admin listener's GET /workers.
func workersInFlight(t *testing.T, admin string) (pids []int, inFlight int) {
	t.Helper()
	var ws []struct {
		PID      int `json:"pid"`
		InFlight int `json:"in_flight"`
	}
	if err := json.Unmarshal(get(t, admin+"/workers").Body, &ws); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		pids = append(pids, w.PID)
		inFlight += w.InFlight
	}
	return pids, inFlight
}

// TestConcurrentUsleepInOneWorker: PHP's own usleep() suspends only its request: 64 requests
// wait in one native worker until all 64 have arrived (a blocking usleep would let only the
// first in, which would answer "timeout"); then 64 more are each answered with their own tag,
// all seen in flight at once (each sleeps 15 s: sending 64 requests may take seconds here).
func TestConcurrentUsleepInOneWorker(t *testing.T) {
	t.Parallel()
	s, admin := startConcurrent(t, 1, 64, "")
	var wg sync.WaitGroup
	errs := make(chan string, 128)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := doErr(context.Background(), "GET", s.URL+"/barrier?n=64", nil)
			if err != nil || r.Status != 200 || string(r.Body) != "met" {
				errs <- fmt.Sprintf("barrier: %v %d %q", err, r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("u%d", i)
			r, err := doErr(context.Background(), "GET", s.URL+"/sleep?ms=15000&tag="+tag, nil)
			if err != nil || r.Status != 200 || !strings.HasPrefix(string(r.Body), tag+" ") {
				errs <- fmt.Sprintf("%s: %v %d %q", tag, err, r.Status, r.Body)
			}
		}()
	}
	eventually(t, 30*time.Second, "64 requests in flight on the one worker", func() bool {
		_, n := workersInFlight(t, admin)
		return n == 64
	})
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestConcurrentKill9FailsTheRequestsInFlight: kill -9 of a native worker with 50 requests in
// flight: those get 502, and the next requests are served by its replacement.
func TestConcurrentKill9FailsTheRequestsInFlight(t *testing.T) {
	t.Parallel()
	s, admin := startConcurrent(t, 1, 64, "")
	results := sleepers(s, 50)
	var pids []int
	eventually(t, 30*time.Second, "50 requests in flight", func() bool {
		var n int
		pids, n = workersInFlight(t, admin)
		return n == 50
	})
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if st := <-results; st != 502 {
			t.Fatalf("a request in flight got %d, want 502", st)
		}
	}
	if r := get(t, s.URL+"/sleep?ms=1&tag=after"); r.Status != 200 {
		t.Fatalf("after the kill: %d %s", r.Status, r.Body)
	}
}

// TestConcurrentExecTimeoutCancelsOneFiber: a request past exec_timeout gets 504, its finally
// block runs (the fiber is cancelled where it waits), and the worker and its other requests go on.
func TestConcurrentExecTimeoutCancelsOneFiber(t *testing.T) {
	t.Parallel()
	s, admin := startConcurrent(t, 1, 16, "  exec_timeout: 1s\n")
	before, _ := workersInFlight(t, admin)
	slow := make(chan int, 1)
	go func() { slow <- get(t, s.URL+"/finally?ms=60000").Status }()
	for i := range 5 {
		if r := get(t, s.URL+fmt.Sprintf("/sleep?ms=10&tag=%d", i)); r.Status != 200 {
			t.Fatalf("beside the slow request: %d %s", r.Status, r.Body)
		}
	}
	if st := <-slow; st != 504 {
		t.Fatalf("the slow request: %d, want 504", st)
	}
	s.log.waitFor(t, "finally ran", 10*time.Second)
	if after, _ := workersInFlight(t, admin); after[0] != before[0] {
		t.Fatalf("the worker was replaced (%d -> %d); a cancelled fiber must not cost it", before[0], after[0])
	}
}

// TestConcurrentResetUnderLoadFailsNone: SIGHUP while concurrent workers are busy drains and
// replaces them without a failed request.
func TestConcurrentResetUnderLoadFailsNone(t *testing.T) {
	t.Parallel()
	s, admin := startConcurrent(t, 2, 32, "")
	before, _ := workersInFlight(t, admin)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r, err := doErr(context.Background(), "GET", s.URL+"/sleep?ms=20", nil)
				if err != nil || r.Status != 200 {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%v %d %s", err, r.Status, r.Body))
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // under load before the reset; not a timing assertion
	s.signal(syscall.SIGHUP)
	eventually(t, 60*time.Second, "both workers replaced", func() bool {
		after, _ := workersInFlight(t, admin)
		return len(after) == 2 && after[0] != before[0] && after[1] != before[1] && after[0] != 0 && after[1] != 0
	})
	cancel()
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d requests failed across the reset, first: %s", len(failed), failed[0])
	}
}

// TestConcurrentMultipartUpload: concurrent requests run in the PHP library's loop, which takes
// the fields and files the server parsed from a multipart body (under concurrency 1 the native
// runtime's PHP parses it itself).
func TestConcurrentMultipartUpload(t *testing.T) {
	t.Parallel()
	s, _ := startConcurrent(t, 1, 8, "")
	body := "--XyZ\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhello\r\n" +
		"--XyZ\r\nContent-Disposition: form-data; name=\"doc\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\n" +
		strings.Repeat("x", 100000) + "\r\n--XyZ--\r\n"
	r := do(t, "POST", s.URL+"/upload", strings.NewReader(body), "Content-Type", "multipart/form-data; boundary=XyZ")
	want := `{"fields":{"title":"hello"},"files":{"doc":["a.txt",100000,100000]}}`
	if r.Status != 200 || string(r.Body) != want {
		t.Fatalf("upload: %d %s, want %s", r.Status, r.Body, want)
	}
}
