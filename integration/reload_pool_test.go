package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// reloadYAML is a config of reload.php with the given count, concurrency and RELOAD_TAG; the
// harness adds the http section at start, and the edits below the same.
func reloadYAML(t *testing.T, admin string, count, concurrency int, tag string) string {
	return fmt.Sprintf("workers:\n  command: php %s\n  runtime: native\n  count: %d\n  concurrency: %d\n  env: { RELOAD_TAG: %s }\nadmin:\n  address: %s\n",
		fixture(t, "reload.php"), count, concurrency, tag, admin)
}

// startReloadable starts reload.php with 2 workers at concurrency 1 and RELOAD_TAG tag, with an
// admin listener, and returns the server, the admin address and the config file to edit.
func startReloadable(t *testing.T, tag string) (s *server, admin, cfg string) {
	t.Helper()
	admin = freeAddr(t)
	s = startServer(t, reloadYAML(t, admin, 2, 1, tag))
	return s, admin, filepath.Join(s.dir, "peregrine.yaml")
}

// httpAt0 is the http section the harness gives a config (launch).
const httpAt0 = "http:\n  address: 127.0.0.1:0\n"

type reloadAnswer struct {
	PID         int
	Tag         string
	Concurrency int
}

// TestReloadChangesCountConcurrencyAndEnv: a reload applies workers.count, workers.concurrency
// and workers.env of one edit together, as php-fpm's reload applies its pool's settings, with
// no failed request under a steady load: by SIGHUP (2 workers at concurrency 1 to 3 at 4),
// then by peregrine reset (to 1 at 1). A multipart upload works after each, the server parsing
// it at concurrency 4 and PHP itself at 1.
func TestReloadChangesCountConcurrencyAndEnv(t *testing.T) {
	t.Parallel()
	s, admin, cfg := startReloadable(t, "a")

	stop := steadyLoad(4, s.URL+"/?ms=5")
	defer stop()

	answer := func() reloadAnswer {
		t.Helper()
		var a reloadAnswer
		r := get(t, s.URL+"/")
		if err := json.Unmarshal(r.Body, &a); err != nil {
			t.Fatalf("GET /: %d %s", r.Status, r.Body)
		}
		return a
	}
	upload := func(when string) {
		t.Helper()
		body := "--XyZ\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhello\r\n" +
			"--XyZ\r\nContent-Disposition: form-data; name=\"doc\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\n" +
			strings.Repeat("x", 70000) + "\r\n--XyZ--\r\n"
		r := do(t, "POST", s.URL+"/upload", strings.NewReader(body), "Content-Type", "multipart/form-data; boundary=XyZ")
		if want := `{"fields":{"title":"hello"},"files":{"doc":["a.txt",70000]}}`; r.Status != 200 || string(r.Body) != want {
			t.Errorf("a multipart upload %s: %d %s, want %s", when, r.Status, r.Body, want)
		}
	}
	if a := answer(); a.Tag != "a" || a.Concurrency != 1 {
		t.Fatalf("before: %+v", a)
	}
	upload("before the reloads")
	before, _ := workersInFlight(t, "http://"+admin)

	// A slow request in flight across the replacement: the old pool finishes it.
	slow := make(chan string, 1)
	go func() {
		r, err := doErr(context.Background(), "GET", s.URL+"/?ms=1500", nil)
		slow <- fmt.Sprintf("%v %d %s", err, r.Status, r.Body)
	}()
	s.log.waitFor(t, "a slow request started", 10*time.Second)

	// SIGHUP: 3 workers, 4 requests each, RELOAD_TAG b.
	if err := os.WriteFile(cfg, []byte(httpAt0+reloadYAML(t, admin, 3, 4, "b")), 0o644); err != nil {
		t.Fatal(err)
	}
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `all workers replaced`, 60*time.Second)
	pids, _ := workersInFlight(t, "http://"+admin)
	if a := answer(); len(pids) != 3 || a.Tag != "b" || a.Concurrency != 4 {
		t.Errorf("after SIGHUP: workers %v (before %v), an answer %+v: want 3 workers, tag b, concurrency 4", pids, before, a)
	}
	for _, p := range pids {
		for _, b := range before {
			if p == b {
				t.Errorf("worker %d of the old pool still serves", p)
			}
		}
	}
	upload("at concurrency 4")
	if got := <-slow; !strings.HasPrefix(got, "<nil> 200 ") || !strings.Contains(got, `"tag":"a"`) {
		t.Errorf("the request in flight across the replacement: %s", got)
	}

	// peregrine reset reads the file as SIGHUP does: 1 worker, concurrency 1, RELOAD_TAG c.
	if err := os.WriteFile(cfg, []byte(httpAt0+reloadYAML(t, admin, 1, 1, "c")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := runCLI(t, s.dir, nil, "reset", "-c", cfg); code != 0 {
		t.Fatalf("peregrine reset: %d %s", code, out)
	}
	pids, _ = workersInFlight(t, "http://"+admin)
	if a := answer(); len(pids) != 1 || a.Tag != "c" || a.Concurrency != 1 {
		t.Errorf("after peregrine reset: workers %v, an answer %+v: want 1 worker, tag c, concurrency 1", pids, a)
	}
	upload("back at concurrency 1")

	served, failed := stop()
	t.Logf("%d requests served across two reloads", served)
	if len(failed) > 0 {
		t.Errorf("%d requests failed across the reloads, first: %s", len(failed), failed[0])
	}
	if served == 0 {
		t.Error("no request was served during the reloads")
	}
	if log := s.log.String(); strings.Contains(log, "need a restart") || strings.Contains(log, "reload failed") {
		t.Errorf("the reloads were not applied whole:\n%s", log)
	}
}

// steadyLoad GETs url from clients goroutines in a loop until the returned stop, which returns
// how many answers were 200 and what the others were. Stop may be called again: it returns
// nothing more.
func steadyLoad(clients int, url string) (stop func() (served int64, failed []string)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	var ok atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r, err := doErr(context.Background(), "GET", url, nil)
				if err != nil || r.Status != 200 {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%v %d %s", err, r.Status, r.Body))
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		}()
	}
	var once sync.Once
	return func() (int64, []string) {
		var served int64
		var failed []string
		once.Do(func() {
			cancel()
			wg.Wait()
			served, failed = ok.Load(), bad
		})
		return served, failed
	}
}

// TestReloadToAPoolThatCannotBoot: a reload to a new worker count whose workers cannot boot
// leaves the running workers serving on their settings, the template forking them too (a
// worker killed afterwards comes back on the old script), and the next reload of a good file
// applies it.
func TestReloadToAPoolThatCannotBoot(t *testing.T) {
	t.Parallel()
	s, admin, cfg := startReloadable(t, "a")
	before, _ := workersInFlight(t, "http://"+admin)

	bad := strings.Replace(reloadYAML(t, admin, 3, 1, "b"), fixture(t, "reload.php"), fixture(t, "boot-exit.php"), 1)
	if err := os.WriteFile(cfg, []byte(httpAt0+bad), 0o644); err != nil {
		t.Fatal(err)
	}
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `reset incomplete.*could not start`, 60*time.Second)
	var a reloadAnswer
	if r := get(t, s.URL+"/"); r.Status != 200 || json.Unmarshal(r.Body, &a) != nil || a.Tag != "a" {
		t.Fatalf("after a reload that could not boot: %d %s", r.Status, r.Body)
	}
	if pids, _ := workersInFlight(t, "http://"+admin); fmt.Sprint(pids) != fmt.Sprint(before) {
		t.Errorf("workers %v, want the running ones %v", pids, before)
	}
	// A worker killed now comes back on the running settings.
	if err := syscall.Kill(before[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the killed worker replaced and ready", func() bool {
		var ws []struct {
			PID   int
			State string
		}
		if json.Unmarshal(get(t, "http://"+admin+"/workers").Body, &ws) != nil || len(ws) != 2 {
			return false
		}
		return ws[0].PID != before[0] && ws[0].PID != 0 && ws[0].State == "ready"
	})

	if err := os.WriteFile(cfg, []byte(httpAt0+reloadYAML(t, admin, 3, 4, "b")), 0o644); err != nil {
		t.Fatal(err)
	}
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `all workers replaced`, 60*time.Second)
	pids, _ := workersInFlight(t, "http://"+admin)
	if r := get(t, s.URL+"/"); len(pids) != 3 || json.Unmarshal(r.Body, &a) != nil || a.Tag != "b" || a.Concurrency != 4 {
		t.Errorf("the next reload: workers %v, %s", pids, r.Body)
	}
}

// TestReloadShapesInARow: six reloads in a row, each to another worker count and concurrency,
// by SIGHUP and peregrine reset at once for half of them, under a steady load and beside
// clients that give up on their requests at any moment: no request the server kept fails, and
// the last file wins.
func TestReloadShapesInARow(t *testing.T) {
	t.Parallel()
	s, admin, cfg := startReloadable(t, "s0")
	stop := steadyLoad(4, s.URL+"/?ms=3")
	defer stop()
	quit := make(chan struct{})
	var leavers sync.WaitGroup
	for i := range 2 { // clients that leave after 1 to 20 ms, in whatever phase the request is
		leavers.Add(1)
		go func() {
			defer leavers.Done()
			for n := 0; ; n++ {
				select {
				case <-quit:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+(n*7+i)%20)*time.Millisecond)
				_, _ = doErr(ctx, "GET", s.URL+"/?ms=10", nil)
				cancel()
			}
		}()
	}
	shapes := [][2]int{{3, 4}, {1, 1}, {2, 8}, {4, 1}, {1, 2}, {2, 1}}
	for i, sh := range shapes {
		tag := fmt.Sprintf("s%d", i+1)
		if err := os.WriteFile(cfg, []byte(httpAt0+reloadYAML(t, admin, sh[0], sh[1], tag)), 0o644); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 { // both at once: the two resets take turns
			s.signal(syscall.SIGHUP)
		}
		if out, code := runCLI(t, s.dir, nil, "reset", "-c", cfg); code != 0 {
			t.Fatalf("peregrine reset %d: %d %s", i, code, out)
		}
		eventually(t, 30*time.Second, "reload "+tag, func() bool {
			var a reloadAnswer
			pids, _ := workersInFlight(t, "http://"+admin)
			r := get(t, s.URL+"/")
			return json.Unmarshal(r.Body, &a) == nil && a.Tag == tag && a.Concurrency == sh[1] && len(pids) == sh[0]
		})
	}
	close(quit)
	leavers.Wait()
	served, failed := stop()
	t.Logf("%d requests served across %d reloads", served, len(shapes))
	if len(failed) > 0 {
		t.Errorf("%d requests failed across the reloads, first: %s", len(failed), failed[0])
	}
	for _, bad := range []string{`reset incomplete`, `"level":"ERROR"`} {
		if n := s.log.count(bad); n > 0 {
			t.Errorf("the log says %s %d times", bad, n)
		}
	}
}
