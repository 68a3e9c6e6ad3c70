package integration

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Direct mode with workers.concurrency above 1 (docs/direct.md, "Concurrency"): each request
// runs in a fiber of its own, and a worker goes on reading and answering its other connections
// while one request waits.

func startDirectFibers(t *testing.T, count, concurrency int, extra string) *server {
	t.Helper()
	cfg := strings.Replace(directConfig, "%s", fixture(t, "app.php"), 1)
	cfg = strings.Replace(cfg, "count: 2", "count: "+strconv.Itoa(count), 1)
	return startServer(t, cfg+"  concurrency: "+strconv.Itoa(concurrency)+"\n"+extra)
}

// ranOnce checks that each id in ids was run by PHP exactly once (sleptAny in the log).
func ranOnce(t *testing.T, s *server, ids []string) {
	t.Helper()
	log := s.log.String()
	for _, id := range ids {
		if n := strings.Count(log, "&id="+id+"\""); n != 1 {
			t.Errorf("request %s ran %d times, want 1", id, n)
		}
	}
}

// TestDirectFibersManyClients: many more clients at once than workers, each asking for a
// request that waits 50 ms, on connections of their own and on kept-alive ones, with bodies
// around the socket buffers' sizes: every one is answered whole, none runs twice.
func TestDirectFibersManyClients(t *testing.T) {
	t.Parallel()
	s := startDirectFibers(t, 2, 64, "")
	const clients = 300
	var wg sync.WaitGroup
	errs := make(chan string, clients*2)
	ids := make([]string, 0, clients)
	for i := range clients {
		id := "many" + strconv.Itoa(i)
		ids = append(ids, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var hdr []string
			if i%2 == 0 {
				hdr = []string{"Connection", "close"}
			}
			r, err := doErr(ctx, "GET", s.URL+"/sleep?ms=50&id="+id, nil, hdr...)
			if err != nil || r.Status != 200 || string(r.Body) != "slept" {
				errs <- fmt.Sprintf("%s: %v %d %q", id, err, r.Status, r.Body)
			}
			// An answer larger than the socket's buffer, held and written as the client reads.
			size := []int{1, 65535, 65536, 65537, 1 << 20}[i%5]
			r, err = doErr(ctx, "GET", s.URL+"/echo-size?size="+strconv.Itoa(size), nil)
			if err != nil || r.Status != 200 || len(r.Body) != size {
				errs <- fmt.Sprintf("echo-size %d: %v %d %d bytes", size, err, r.Status, len(r.Body))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	ranOnce(t, s, ids)
}

// TestDirectFibersOthersGoOn: one worker; while one request waits (a long sleep), the worker
// answers many requests on other connections; then the waiting client leaves, its fiber is
// cancelled (CANCEL, as behind the proxied front), and the worker serves on. At concurrency 1
// the other requests would wait behind the long one and time out.
func TestDirectFibersOthersGoOn(t *testing.T) {
	t.Parallel()
	s := startDirectFibers(t, 1, 8, "")
	slowCtx, leave := context.WithCancel(context.Background())
	slow := make(chan error, 1)
	go func() {
		_, err := doErr(slowCtx, "GET", s.URL+"/sleep?ms=60000&id=slow", nil, "Connection", "close")
		slow <- err
	}()
	eventually(t, 30*time.Second, "the slow request to begin", func() bool { return s.log.count(`id=slow`) == 1 })
	shortRequests(t, s, "other", 50)
	select {
	case err := <-slow:
		t.Fatalf("the slow request ended early: %v", err)
	default:
	}
	leave()
	<-slow
	// Its fiber is cancelled: the worker's 8 places are not held by a client that left.
	shortRequests(t, s, "after", 16)
	if n := s.log.count(`id=slow`); n != 1 {
		t.Errorf("the slow request ran %d times", n)
	}
}

// TestDirectFibersExecTimeout: a request past workers.exec_timeout gets 504 and its fiber is
// cancelled; the worker is not killed (its other requests are answered), as behind the proxied
// front.
func TestDirectFibersExecTimeout(t *testing.T) {
	t.Parallel()
	s := startDirectFibers(t, 1, 4, "  exec_timeout: 1s\n")
	pid := pidOf(t, s)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := doErr(context.Background(), "GET", s.URL+"/sleep?ms=30000&id=late"+strconv.Itoa(i), nil)
			if err != nil || r.Status != 504 {
				t.Errorf("a request past exec_timeout: %v %d, want 504", err, r.Status)
			}
		}()
	}
	wg.Wait()
	if got := pidOf(t, s); got != pid {
		t.Errorf("the worker was replaced (%d, now %d): only the requests should end", pid, got)
	}
	if r := get(t, s.URL+"/sleep?ms=1&id=fine"); r.Status != 200 {
		t.Errorf("after the timeouts: %d", r.Status)
	}
}

// TestDirectFibersResetUnderLoadFailsNothing: SIGHUP replaces every worker while many clients
// keep asking, with requests in flight in every worker: none fails, none runs twice.
func TestDirectFibersResetUnderLoadFailsNothing(t *testing.T) {
	t.Parallel()
	s := startDirectFibers(t, 2, 16, "")
	before := map[int]bool{pidOf(t, s): true, pidOf(t, s): true}
	l := startDirectLoad(t, s, 32, http.MethodPost)
	resetThrice(t, s)
	l.stop(t)
	wantNewWorkers(t, s, before)
}

// TestDirectFibersMaxJobsFailsNothing: workers that leave after max_jobs with requests in
// flight finish them; no request fails.
func TestDirectFibersMaxJobsFailsNothing(t *testing.T) {
	t.Parallel()
	s := startDirectFibers(t, 2, 8, "  max_jobs: 40\n")
	l := startDirectLoad(t, s, 16, http.MethodPost)
	eventually(t, 60*time.Second, "ten retirements", func() bool { return s.log.count(`"reason":"retired"`) >= 10 })
	l.stop(t)
	if n := s.log.count(`worker failed`); n != 0 {
		t.Errorf("%d workers reported as failed:\n%s", n, s.log.String())
	}
}

// shortRequests asks for n short requests one after the other, each given 20 s to be answered.
func shortRequests(t *testing.T, s *server, prefix string, n int) {
	t.Helper()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r, err := doErr(ctx, "GET", s.URL+"/sleep?ms=1&id="+prefix+strconv.Itoa(i), nil)
		cancel()
		if err != nil || r.Status != 200 {
			t.Fatalf("%s request %d: %v %d", prefix, i, err, r.Status)
		}
	}
}
