package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeAddr returns a loopback address that was free a moment ago, for listeners whose address
// a CLI command must read from the config file.
func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + freePorts(t, 1)[0]
}

// metric reads one sample from the admin's /metrics, e.g.
// `peregrine_http_requests_total{method="GET",status_class="2xx"}`; 0 when absent.
func metric(t *testing.T, adminURL, sample string) float64 {
	t.Helper()
	r := get(t, adminURL+"/metrics")
	if r.Status != 200 {
		t.Fatalf("/metrics: %d", r.Status)
	}
	sc := bufio.NewScanner(strings.NewReader(string(r.Body)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, sample+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, sample)), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}

func TestMetricsCountRequestsAndCrashes(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 2\nadmin:\n  address: "+addr+"\n")
	adminURL := "http://" + addr
	ok := `peregrine_http_requests_total{method="GET",status_class="2xx"}`
	bad := `peregrine_http_requests_total{method="GET",status_class="5xx"}`
	posts := `peregrine_http_requests_total{method="POST",status_class="2xx"}`
	crashes := `peregrine_worker_replacements_total{reason="crash"}`
	received := `peregrine_http_received_bytes_total`
	okBefore, badBefore, postsBefore, crashesBefore, receivedBefore :=
		metric(t, adminURL, ok), metric(t, adminURL, bad), metric(t, adminURL, posts), metric(t, adminURL, crashes), metric(t, adminURL, received)

	for range 10 {
		get(t, s.URL+"/pid")
	}
	for range 3 {
		if r := get(t, s.URL+"/crash"); r.Status != http.StatusBadGateway {
			t.Fatalf("crash: %d", r.Status)
		}
	}
	do(t, "POST", s.URL+"/echo", strings.NewReader(strings.Repeat("b", 1000)))

	if d := metric(t, adminURL, ok) - okBefore; d != 10 {
		t.Errorf("GET 2xx moved by %v, want 10", d)
	}
	if d := metric(t, adminURL, bad) - badBefore; d != 3 {
		t.Errorf("GET 5xx moved by %v, want 3", d)
	}
	if d := metric(t, adminURL, posts) - postsBefore; d != 1 {
		t.Errorf("POST 2xx moved by %v, want 1", d)
	}
	// The slot's supervisor counts a crash once it has seen its worker die, which may be after
	// the client has its 502.
	eventually(t, 30*time.Second, "three crash replacements counted", func() bool {
		return metric(t, adminURL, crashes)-crashesBefore >= 3
	})
	if d := metric(t, adminURL, crashes) - crashesBefore; d != 3 {
		t.Errorf("crash replacements moved by %v, want 3", d)
	}
	if d := metric(t, adminURL, received) - receivedBefore; d != 1000 {
		t.Errorf("received bytes moved by %v, want 1000", d)
	}
	if r := get(t, adminURL+"/health"); r.Status != 200 {
		t.Errorf("/health: %d", r.Status)
	}
	if r := get(t, s.URL+"/metrics"); r.Status != 404 {
		t.Errorf("/metrics on the public listener: %d (it must stay on the admin listener)", r.Status)
	}
}

func TestReadyFlipsWhenDrainingAndWhenNoWorkerIsUp(t *testing.T) {
	t.Parallel()
	t.Run("draining", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		// The server drains (and /ready can be seen to say so) as long as a request runs: the
		// test holds one until it has seen the 503 (hold_test.go).
		s := startServer(t, "workers:\n  command: php "+holdWorker(t)+"\n  count: 1\n  stop_timeout: 60s\nadmin:\n  address: "+addr+"\n")
		h := newHold(t)
		if r := get(t, "http://"+addr+"/ready"); r.Status != 200 {
			t.Fatalf("/ready before: %d %s", r.Status, r.Body)
		}
		held := getAsync(s.URL + h.path())
		s.log.waitFor(t, `holding in /hold`, 30*time.Second)
		s.signal(syscall.SIGTERM)
		eventually(t, 30*time.Second, "/ready to answer 503", func() bool {
			r, err := doErr(t.Context(), "GET", "http://"+addr+"/ready", nil)
			return err == nil && r.Status == http.StatusServiceUnavailable
		})
		h.release()
		if o := <-held; o.err != nil || o.Status != 200 {
			t.Errorf("the request the drain waited for: %v, %d %s", o.err, o.Status, o.Body)
		}
		if code := s.wait(t, 30*time.Second); code != 0 {
			t.Errorf("exit code %d after the drain, want 0", code)
		}
	})
	t.Run("no worker up", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		marker := filepath.Join(t.TempDir(), "broken")
		s := startServer(t, "workers:\n  command: php "+fixture(t, "boot-flaky.php")+"\n  count: 1\n  env: { FLAKY_MARKER: "+marker+" }\nadmin:\n  address: "+addr+"\n")
		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		get(t, s.URL+"/crash")
		r := get(t, "http://"+addr+"/ready")
		if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "no worker is ready") {
			t.Fatalf("/ready with every worker down: %d %q", r.Status, r.Body)
		}
	})
}

func TestWorkersAndResetCommands(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 2\nadmin:\n  address: "+addr+"\n")
	cfg := filepath.Join(s.dir, "peregrine.yaml")
	real := map[int]bool{}
	for _, pid := range processesTagged(s.tag) {
		real[pid] = true
	}
	listed := func() map[int]string {
		t.Helper()
		out, code := runCLI(t, s.dir, nil, "workers", "-c", cfg, "--json")
		var list []struct {
			PID   int    `json:"pid"`
			State string `json:"state"`
		}
		if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 {
			t.Fatalf("workers --json: %d %v %s", code, err, out)
		}
		m := map[int]string{}
		for _, w := range list {
			m[w.PID] = w.State
		}
		return m
	}
	before := listed()
	for pid, state := range before {
		if !real[pid] || state != "ready" {
			t.Errorf("listed worker %d (%s) is not one of the server's PHP processes %v", pid, state, real)
		}
	}
	out, code := runCLI(t, s.dir, nil, "workers", "-c", cfg)
	if code != 0 || !regexp.MustCompile(`PID`).MatchString(out) {
		t.Fatalf("workers: %d %s", code, out)
	}
	for pid := range before {
		if !strings.Contains(out, strconv.Itoa(pid)) {
			t.Errorf("workers table misses pid %d:\n%s", pid, out)
		}
	}

	out, code = runCLI(t, s.dir, nil, "reset", "-c", cfg, "--json")
	if code != 0 || !regexp.MustCompile(`"replaced":\s*2`).MatchString(out) {
		t.Fatalf("reset: %d %s", code, out)
	}
	for pid := range listed() {
		if _, old := before[pid]; old {
			t.Fatalf("old worker %d still listed after reset", pid)
		}
	}
	if pid := pidOf(t, s); before[pid] != "" {
		t.Fatalf("old worker %d still serves after reset", pid)
	}
}

func TestWorkersCommandWithoutAdmin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(cfg, []byte("workers:\n  command: php x.php\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, dir, nil, "workers", "-c", cfg)
	if code != 1 || !strings.Contains(out, "admin.address") {
		t.Fatalf("%d %s", code, out)
	}
	addr := freeAddr(t)
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("workers:\n  command: php x.php\nadmin:\n  address: %s\n", addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = runCLI(t, dir, nil, "reset", "-c", cfg)
	if code != 1 || !strings.Contains(out, addr) {
		t.Fatalf("reset with no server running: %d %s", code, out)
	}
}

func TestWatchReplacesWorkersOncePerBurst(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	watched := filepath.Join(src, "config.php")
	if err := os.WriteFile(watched, []byte("<?php\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n  watch: ["+src+"/*.php]\n")
	first := pidOf(t, s)

	if err := os.WriteFile(watched, []byte("<?php // edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.log.waitFor(t, `all workers replaced`, 30*time.Second)
	if !strings.Contains(s.log.String(), "config.php") {
		t.Errorf("the log does not name the changed file:\n%s", s.log.String())
	}
	second := pidOf(t, s)
	if second == first {
		t.Fatal("worker not replaced after a watched file changed")
	}

	// The 50 edits are one burst only if no two are a quiet period (200ms, watch.DefaultQuiet)
	// apart: a machine that stalled this loop that long made two bursts, and two resets are
	// then right.
	var gap time.Duration
	last := time.Now()
	for i := range 50 {
		if err := os.WriteFile(watched, []byte(fmt.Sprintf("<?php // edit %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		gap, last = max(gap, now.Sub(last)), now
	}
	eventually(t, 30*time.Second, "the burst's reset", func() bool { return s.log.count(`all workers replaced`) >= 2 })
	if gap > 100*time.Millisecond {
		t.Skipf("the 50 edits were %v apart at most, near the quiet period: they may have been two bursts", gap)
	}
	third := pidOf(t, s)
	// A file the pattern does not match changes nothing.
	if err := os.WriteFile(filepath.Join(src, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A burst is reported once its quiet period (200ms) passes; watch well beyond it for a stray reset.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := s.log.count(`all workers replaced`); n != 2 {
			t.Fatalf("50 edits and a non-matching one caused %d resets, want 1", n-1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pidOf(t, s) != third {
		t.Fatal("worker replaced without a matching edit")
	}
}
