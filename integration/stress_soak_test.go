//go:build stress

package integration

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"
)

// soakDuration is STRESS_SOAK, 10 minutes by default.
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("STRESS_SOAK")
	if v == "" {
		return 10 * time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("STRESS_SOAK=%q: %v", v, err)
	}
	return d
}

// TestStressSoak holds a steady load for STRESS_SOAK (10 minutes) with max_jobs recycling a
// worker every second or so: GETs, bodies and uploads. Not one request fails, and the daemon's
// RSS, goroutines and open descriptors stay flat; no worker is left a zombie; no upload is left.
// It runs the cli runtime's exec'd workers.
func TestStressSoak(t *testing.T) { soak(t, "runtime: cli") }

// TestStressSoakForked is the soak on the native runtime, whose workers are forked from a
// template by default (workers.fork): the same load, the same checks, forks instead of execs.
func TestStressSoakForked(t *testing.T) { soak(t, "runtime: native") }

func soak(t *testing.T, runtime string) {
	const maxJobs = 200
	d := soakDuration(t)
	tmp := stressTempDir(t)
	// The generator keeps its 64 connections open for the whole run (idle_timeout: 1h), so
	// that the daemon's goroutines and descriptors, one per connection, can be compared.
	s := startStress(t, fmt.Sprintf("http:\n  idle_timeout: 1h\nworkers:\n  %s\n  command: php %s\n  count: 4\n  max_jobs: %d\n", runtime, fixture(t, "app.php"), maxJobs))

	body := bytes.Repeat([]byte("soak "), 800) // 4 KB
	var upload bytes.Buffer
	mw := multipart.NewWriter(&upload)
	_ = mw.WriteField("field", "value")
	fw, _ := mw.CreateFormFile("file", "soak.bin")
	_, _ = fw.Write(bytes.Repeat([]byte{0xAB}, 16<<10))
	_ = mw.Close()
	uploadHeader := http.Header{"Content-Type": {mw.FormDataContentType()}}
	l := startLoad(t, s.URL, loadOptions{
		Phases: []phase{{backgroundRate, d}},
		Warm:   "/sleep?ms=100",
		Request: func(i int) (string, string, []byte, http.Header) {
			switch {
			case i%20 == 0:
				return "POST", "/echo", body, nil
			case i%50 == 1:
				return "POST", "/echo", upload.Bytes(), uploadHeader
			default:
				return "GET", "/pid", nil, nil
			}
		},
	})

	// Sample every 30th of the run; zombies are checked twice a second apart, since a worker
	// that just exited is a zombie until the daemon reaps it.
	every := max(d/30, time.Second)
	var samples []procStats
	persistentZombies := map[int]bool{}
	start := time.Now()
	for {
		time.Sleep(every)
		if time.Since(start) > d-every/2 {
			break // the last sample is taken while the load still runs
		}
		st := s.stats(t)
		if len(st.Zombies) > 0 {
			time.Sleep(time.Second)
			for _, pid := range zombieChildren(s.pid()) {
				if slices.Contains(st.Zombies, pid) {
					persistentZombies[pid] = true
				}
			}
		}
		samples = append(samples, st)
	}
	res := l.wait()
	final := s.stats(t)

	// Start after a tenth of the run (connections opened, buffers grown), middle, end.
	at := func(f float64) procStats { return samples[min(len(samples)-1, int(f*float64(len(samples))))] }
	first, middle, end := at(0.1), at(0.5), samples[len(samples)-1]
	if bad := res.notOK(); len(bad) > 0 {
		t.Errorf("%d of %d requests failed during the soak:%s", len(bad), len(res.Shots), describe(bad))
	}
	if res.Skipped > 0 || res.rate() < 200 {
		t.Errorf("load not held: %.0f req/s, %d requests skipped", res.rate(), res.Skipped)
	}
	recycled := s.metric(t, `peregrine_worker_replacements_total{reason="max_jobs"}`)
	if recycled < float64(len(res.Shots)/maxJobs/2) {
		t.Errorf("only %v workers recycled by max_jobs=%d over %d requests", recycled, maxJobs, len(res.Shots))
	}
	// Flat: the second half never rises above the start by more than noise (a few requests in
	// flight hold a goroutine or two each).
	var worst procStats
	for _, st := range samples[len(samples)/2:] {
		worst.RSS = max(worst.RSS, st.RSS)
		worst.Goroutines = max(worst.Goroutines, st.Goroutines)
		worst.FDs = max(worst.FDs, st.FDs)
		worst.Conns = max(worst.Conns, st.Conns)
	}
	if worst.RSS > first.RSS+first.RSS/4+(4<<20) {
		t.Errorf("RSS grew from %s to %s", mib(first.RSS), mib(worst.RSS))
	}
	if worst.Goroutines > first.Goroutines+16 {
		t.Errorf("goroutines grew from %d to %d (client connections: %d, then at most %d)", first.Goroutines, worst.Goroutines, first.Conns, worst.Conns)
	}
	if worst.FDs > first.FDs+8 {
		t.Errorf("open descriptors grew from %d to %d (client connections: %d, then at most %d)", first.FDs, worst.FDs, first.Conns, worst.Conns)
	}
	if len(persistentZombies) > 0 {
		t.Errorf("workers left unreaped: %v", persistentZombies)
	}
	if left := uploadsLeft(tmp); len(left) > 0 {
		t.Errorf("%d uploads left in the temporary directory: %v", len(left), left)
	}
	figures(t, "%.0f req/s for %s, %d requests, %d non-200, %v workers recycled by max_jobs; start: %s; middle: %s; end: %s; after the load: %s; no zombie outlived a second, %d uploads left",
		res.rate(), d, len(res.Shots), len(res.notOK()), recycled, first, middle, end, final, len(uploadsLeft(tmp)))
}
