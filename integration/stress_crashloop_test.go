//go:build stress

package integration

import (
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

// TestStressCrashLoopAfterDeploy deploys code that dies at boot (testdata/workers/boot-flaky.php
// with its marker file present) under load. The SIGHUP replaces no worker: each old one keeps
// serving and the log says why. Then two workers die; their slots cannot boot the new code and
// retry with exponential backoff, one log line per attempt with PHP's error, while the two
// healthy workers serve every request. When the code is mended, the slots recover.
func TestStressCrashLoopAfterDeploy(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "broken")
	s := startStress(t, "workers:\n  command: php "+fixture(t, "boot-flaky.php")+"\n  count: 4\n  env: { FLAKY_MARKER: "+marker+" }\n")
	duration := scaled(20 * time.Second)
	l := startLoad(t, s.URL, loadOptions{Phases: []phase{{backgroundRate, duration}}})
	time.Sleep(time.Second)

	// The deploy: new workers die at boot.
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := pidSet(s.workers())
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `"msg":"reset incomplete"`, 30*time.Second)
	if n := s.log.count(`"msg":"worker not replaced: its replacement failed to start".*boot failure injected by marker`); n != 4 {
		t.Errorf("%d workers kept after the broken deploy with PHP's error logged, want 4", n)
	}
	if after := pidSet(s.workers()); len(after) != 4 || !mapsEqual(before, after) {
		t.Errorf("workers before the deploy %v, after %v: a broken deploy must leave the old ones serving", before, after)
	}

	// Two workers die; their slots loop on the broken code.
	crashedAt := time.Now()
	for range 2 {
		if r := get(t, s.URL+"/crash"); r.Status != http.StatusBadGateway {
			t.Errorf("/crash: %d, want 502", r.Status)
		}
	}
	readyFailures := 0
	for time.Since(crashedAt) < duration-2*time.Second {
		if r, err := doErr(t.Context(), "GET", s.admin+"/ready", nil); err != nil || r.Status != 200 {
			readyFailures++
		}
		select {
		case <-s.done:
			t.Fatalf("the server exited during the crash loop: %v", s.err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	res := l.wait()

	// Mend the code: the looping slots come back at their next attempt.
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	mendedAt := time.Now()
	s.awaitFull(t, 15*time.Second)
	recovered := time.Since(mendedAt)

	if bad := res.notOK(); len(bad) > 0 {
		t.Errorf("%d requests failed while two slots looped, want 0 (the healthy workers serve):%s", len(bad), describe(bad))
	}
	if readyFailures > 0 {
		t.Errorf("/ready failed %d times while two workers were healthy", readyFailures)
	}
	if res.Skipped > 0 || res.rate() < 200 {
		t.Errorf("load not held: %.0f req/s, %d requests skipped", res.rate(), res.Skipped)
	}

	// One line per attempt, with PHP's error and a delay that doubles, per slot.
	attempts := map[string][]time.Duration{}
	rx := regexp.MustCompile(`"msg":"worker failed to start","worker":(\d+),"attempt":(\d+),"retry_in":"([^"]+)","err":"([^"]*)`)
	for _, m := range rx.FindAllStringSubmatch(s.log.String(), -1) {
		slot, attempt := m[1], atoi(t, m[2])
		if attempt != len(attempts[slot])+1 {
			t.Errorf("worker %s: attempt %d logged after %d attempts", slot, attempt, len(attempts[slot]))
		}
		if !strings.Contains(m[4], "boot failure injected by marker") {
			t.Errorf("worker %s attempt %d: the log line lacks PHP's error: %s", slot, attempt, m[4])
		}
		d, err := time.ParseDuration(m[3])
		if err != nil {
			t.Fatal(err)
		}
		attempts[slot] = append(attempts[slot], d)
	}
	if len(attempts) != 2 {
		t.Errorf("%d slots looped, want the 2 whose worker died: %v", len(attempts), attempts)
	}
	// The attempts the loop's window surely holds, each its delay and at most half a second of
	// a boot that fails: 5 at full scale, fewer in a short run (STRESS_SCALE).
	window := duration - 2*time.Second
	wantAttempts, spent := 0, time.Duration(0)
	for d := 100 * time.Millisecond; wantAttempts < 5 && spent+d+500*time.Millisecond <= window; d *= 2 {
		spent += d + 500*time.Millisecond
		wantAttempts++
	}
	total := 0
	var delays []string
	for slot, ds := range attempts {
		total += len(ds)
		for i, d := range ds {
			if want := min(100*time.Millisecond<<i, 10*time.Second); d != want {
				t.Errorf("worker %s: attempt %d retries in %s, want %s", slot, i+1, d, want)
			}
		}
		if len(ds) < max(wantAttempts, 2) {
			t.Errorf("worker %s: %d attempts in %s, want at least %d", slot, len(ds), window, max(wantAttempts, 2))
		}
		delays = append(delays, "worker "+slot+": "+strconv.Itoa(len(ds))+" attempts, last retry in "+ds[len(ds)-1].String())
	}
	figures(t, "%.0f req/s for %s, %d requests; broken deploy kept 4 of 4 old workers; 2 workers crashed (2 x 502); %d boot attempts logged with PHP's error (%s); %d other requests failed; recovered %s after the fix",
		res.rate(), duration, len(res.Shots), total, strings.Join(delays, "; "), len(res.notOK()), ms(recovered))
}

func mapsEqual(a, b map[int]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
