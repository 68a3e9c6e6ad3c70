//go:build stress

package integration

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"
)

// mixedLoad sends mostly GET /pid and, every tenth request, a request that keeps its worker
// busy for sleepMS, so that signals land while requests run.
func mixedLoad(sleepMS int) func(i int) (string, string, []byte, http.Header) {
	return func(i int) (string, string, []byte, http.Header) {
		if i%10 == 0 {
			return "GET", fmt.Sprintf("/sleep?ms=%d", sleepMS), nil, nil
		}
		return "GET", "/pid", nil, nil
	}
}

// TestStressSIGHUP replaces every worker with SIGHUP every 2 s for 30 s under load: not one
// request may fail, and every SIGHUP replaces every worker.
func TestStressSIGHUP(t *testing.T) {
	s := startStress(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 4\n")
	duration := scaled(30 * time.Second)
	l := startLoad(t, s.URL, loadOptions{Phases: []phase{{backgroundRate, duration}}, Request: mixedLoad(20)})
	first := pidSet(s.workers())

	signals := 0
	tick := time.NewTicker(2 * time.Second)
	end := time.Now().Add(duration - time.Second)
	for now := range tick.C {
		if now.After(end) {
			break
		}
		s.signal(syscall.SIGHUP)
		signals++
		// A SIGHUP during a reset folds into one more reset; wait, so that each counts once.
		eventually(t, 10*time.Second, fmt.Sprintf("reset %d", signals), func() bool {
			return s.log.count(`"msg":"all workers replaced"`) >= signals
		})
	}
	tick.Stop()
	res := l.wait()

	if bad := res.notOK(); len(bad) > 0 {
		t.Errorf("%d of %d requests failed during the SIGHUPs, want 0:%s", len(bad), len(res.Shots), describe(bad))
	}
	if n := s.log.count(`"msg":"all workers replaced"`); n != signals {
		t.Errorf("%d SIGHUPs, %d complete resets", signals, n)
	}
	if n := s.log.count(`reset incomplete|not replaced`); n > 0 {
		t.Errorf("%d resets or workers not replaced:\n%s", n, s.log.String())
	}
	if replaced := s.metric(t, `peregrine_worker_replacements_total{reason="reset"}`); replaced != float64(4*signals) {
		t.Errorf("%v workers replaced by reset, want %d", replaced, 4*signals)
	}
	for pid := range pidSet(s.workers()) {
		if first[pid] {
			t.Errorf("worker %d from before the SIGHUPs still runs", pid)
		}
	}
	var took []time.Duration
	for _, m := range regexp.MustCompile(`"msg":"all workers replaced","duration":"([^"]+)"`).FindAllStringSubmatch(s.log.String(), -1) {
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatal(err)
		}
		took = append(took, d)
	}
	if res.Skipped > 0 || res.rate() < 200 {
		t.Errorf("load not held: %.0f req/s, %d requests skipped", res.rate(), res.Skipped)
	}
	figures(t, "%.0f req/s for %s, %d requests, %d SIGHUP (%d workers replaced), %d non-200, %d lost; reset p50 %s max %s; p99 latency %s",
		res.rate(), duration, len(res.Shots), signals, 4*signals, len(res.notOK()), len(res.notOK()),
		ms(percentile(took, 50)), ms(slices.Max(took)), ms(res.percentile(99, nil)))
}

// TestStressSIGTERM stops the server with SIGTERM under load, with requests in flight. Every
// request the server accepted (its access log has it) is answered with 200, the server exits
// 0, and the only errors the clients see are refused connections, all after the signal.
func TestStressSIGTERM(t *testing.T) {
	s := startStress(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 4\n  stop_timeout: 10s\nlog:\n  access: true\n")
	before := scaled(5 * time.Second)
	l := startLoad(t, s.URL, loadOptions{Phases: []phase{{backgroundRate, before + 3*time.Second}}, Request: mixedLoad(100)})
	time.Sleep(before)
	sigAt := time.Now()
	s.signal(syscall.SIGTERM)
	code := s.wait(t, 30*time.Second)
	stoppedAt := time.Now()
	res := l.wait()

	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	inFlight, refusedN, answered := 0, 0, 0
	var lost []shot
	var firstRefusal time.Time
	for _, r := range res.Shots {
		switch {
		case r.Status == 200:
			answered++
			if r.Start.Before(sigAt) && r.End.After(sigAt) {
				inFlight++
			}
		case r.Err != nil && refused(r.Err):
			refusedN++
			if firstRefusal.IsZero() || r.End.Before(firstRefusal) {
				firstRefusal = r.End
			}
		default:
			lost = append(lost, r)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d requests neither answered with 200 nor refused:%s", len(lost), describe(lost))
	}
	if !firstRefusal.IsZero() && firstRefusal.Before(sigAt) {
		t.Errorf("a connection was refused %s before the SIGTERM", sigAt.Sub(firstRefusal))
	}
	// What the server accepted, it answered: its access log has exactly the clients' 200s.
	logged := s.log.count(`"msg":"request"`)
	logged200 := s.log.count(`"msg":"request".*"status":200,`)
	if logged != logged200 || logged200 != answered {
		t.Errorf("the access log has %d requests (%d with 200); the clients got %d answers with 200", logged, logged200, answered)
	}
	if pre := res.between(res.Start, sigAt); pre.rate() < 200 || res.Skipped > 0 {
		t.Errorf("load not held before the signal: %.0f req/s, %d requests skipped", pre.rate(), res.Skipped)
	}
	if inFlight == 0 {
		t.Errorf("no request was in flight at the SIGTERM; the test proves nothing")
	}
	figures(t, "%.0f req/s, %d requests; %d in flight at SIGTERM, all answered 200; %d accepted = %d answered; %d refused after the signal, 0 before; %d lost; drained and exited 0 in %s",
		res.between(res.Start, sigAt).rate(), len(res.Shots), inFlight, logged, answered, refusedN, len(lost), ms(stoppedAt.Sub(sigAt)))
}
