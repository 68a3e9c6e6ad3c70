package main

// The concurrency scenario (issue 17): handlers that wait 50 ms, written the blocking way, on
// Peregrine with `workers.concurrency` (each request a fiber; the wait suspends only it) beside
// nginx + PHP-FPM with 4 children on the same script (examples/concurrency). Seed 002's
// usleep(50000) with 4 workers x 256 under wrk -c1000, then the "real I/O, no rewrite" waits:
// PDO MySQL `SELECT SLEEP(0.05)` (4 x 32, 128 connections), file_get_contents() of a local HTTP
// endpoint that answers after 50 ms (served by this program), phpredis BLPOP timing out at
// 50 ms, and an Amp v2 generator yielding Amp\delay(50). A wait whose service or PHP extension
// is missing gets a row that says so; the rest of the bench goes on.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// concResult is what the concurrency scenario measured: one row per wait and system.
type concResult struct {
	rows []*concRow
}

type concRow struct {
	wait    string // what the handler waits on
	system  string
	workers int
	slots   int // requests in flight one worker may hold (1 for PHP-FPM)
	conns   int
	runs    []result
	skipped string        // why the row was not measured
	wait1   time.Duration // one wait alone, when it is not 50 ms (Redis's timeouts)
}

// ceiling is the req/s the row's setup allows at 50 ms a request: every connection, or every
// request slot when there are fewer, busy all the time.
func (r *concRow) ceiling() float64 {
	w := 50 * time.Millisecond
	if r.wait1 > 0 {
		w = r.wait1
	}
	return float64(min(r.conns, r.workers*r.slots)) / w.Seconds()
}

func (r *concRow) medianRPS() float64 {
	xs := make([]float64, len(r.runs))
	for i, x := range r.runs {
		xs[i] = x.rps
	}
	return median(xs)
}

// concWait is one of the waits of examples/concurrency.
type concWait struct {
	name   string // the row's label
	path   string // on worker.php and fpm/index.php
	script string // the Peregrine worker script
	slots  int    // workers.concurrency
	conns  int
	fpm    bool          // also measured on nginx + PHP-FPM
	needs  func() string // what is missing, or ""
}

const concWorkers = 4

func (l *lab) concurrencyScenario(p plan) (*concResult, error) {
	// The endpoint file_get_contents() reads: answers after 50 ms.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	slow := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "answered after 50 ms")
	})}
	go func() { _ = slow.Serve(ln) }()
	defer slow.Close()
	env := map[string]string{
		// (BENCH_MYSQL_DSN keeps its default: PHP-FPM's env[] lines would take its ; and = apart.)
		"BENCH_HTTP_URL": "http://" + ln.Addr().String() + "/",
		"BENCH_REDIS":    "127.0.0.1:6379",
	}

	waits := []concWait{
		{name: "usleep(50000)", path: "/sleep", script: "examples/concurrency/worker.php", slots: 256, conns: 1000, fpm: true},
		{name: "PDO MySQL SELECT SLEEP(0.05)", path: "/mysql", script: "examples/concurrency/worker.php", slots: 32, conns: 128, fpm: true,
			needs: func() string {
				return firstNonEmpty(phpExtMissing("pdo_mysql"), tcpMissing("MariaDB", "127.0.0.1:3306"))
			}},
		{name: "file_get_contents(http://…, 50 ms)", path: "/http", script: "examples/concurrency/worker.php", slots: 256, conns: 1000, fpm: true},
		{name: "phpredis BLPOP, 50 ms timeout", path: "/redis", script: "examples/concurrency/worker.php", slots: 256, conns: 1000, fpm: true,
			needs: func() string { return firstNonEmpty(phpExtMissing("redis"), tcpMissing("Redis", "127.0.0.1:6379")) }},
		{name: "Amp v2 generator, yield Amp\\delay(50)", path: "/", script: "examples/concurrency/amp.php", slots: 256, conns: 1000,
			needs: func() string { return fileMissing("/usr/share/php/Amp/functions.php", "php-amphp-amp") }},
	}

	dur := p.delayDur
	res := &concResult{}
	servers := map[string]*server{} // by script and slots
	defer func() {
		for _, s := range servers {
			l.stopServer(s)
		}
	}()
	var fpm *server
	fpmFailed := ""
	for _, w := range waits {
		pr := &concRow{wait: w.name, system: fmt.Sprintf("Peregrine, concurrency %d", w.slots), workers: concWorkers, slots: w.slots, conns: w.conns}
		res.rows = append(res.rows, pr)
		var fr *concRow
		if w.fpm {
			fr = &concRow{wait: w.name, system: sysFPM, workers: concWorkers, slots: 1, conns: w.conns}
			res.rows = append(res.rows, fr)
		}
		if w.needs != nil {
			if missing := w.needs(); missing != "" {
				pr.skipped = missing
				if fr != nil {
					fr.skipped = missing
				}
				logf("concurrency: %s: skipped (%s)", w.name, missing)
				continue
			}
		}
		if w.path == "/redis" {
			// Redis ends a blocking command's timeout on its clock (hz): with hz 10, a 50 ms
			// BLPOP returns after about 100 ms. The ceiling is taken from what one BLPOP takes.
			pr.wait1 = blpopTime()
			if fr != nil {
				fr.wait1 = pr.wait1
			}
		}
		key := w.script + "/" + strconv.Itoa(w.slots)
		s := servers[key]
		if s == nil {
			s, err = l.startConcurrentPeregrine(pr.system, w.script, w.slots, env)
			if err != nil {
				pr.skipped = "did not start: " + firstLine(err.Error(), "")
				logf("concurrency: %s: %v", w.name, err)
			} else {
				servers[key] = s
			}
		}
		if s != nil {
			base := strings.TrimSuffix(s.url, "/sleep")
			if err := l.measureConc(s, base+w.path, pr, p, dur); err != nil {
				return nil, err
			}
		}
		if fr == nil {
			continue
		}
		if fpm == nil && fpmFailed == "" {
			fpm, err = l.startFPM(sysFPM, fpmOptions{docroot: "examples/concurrency/fpm", workers: concWorkers, backlog: fpmBacklog, env: env, path: "/sleep"})
			if err != nil {
				fpmFailed = "did not start: " + firstLine(err.Error(), "")
			} else {
				defer l.stopServer(fpm)
			}
		}
		if fpm == nil {
			fr.skipped = fpmFailed
			continue
		}
		if err := l.measureConc(fpm, strings.TrimSuffix(fpm.url, "/sleep")+w.path, fr, p, dur); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// measureConc checks that url answers 200, then loads it with wrk (a warm-up, then p.runs runs).
// A wait that fails its check gets the answer in its row instead.
func (l *lab) measureConc(s *server, url string, row *concRow, p plan, dur time.Duration) error {
	resp, err := l.client(10 * time.Second).Get(url)
	if err != nil {
		row.skipped = "check failed: " + err.Error()
		return nil
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		row.skipped = fmt.Sprintf("check failed: %d %.160s", resp.StatusCode, strings.TrimSpace(string(body)))
		logf("concurrency: %s on %s: %s", row.wait, row.system, row.skipped)
		return nil
	}
	logf("concurrency: %s on %s, %d workers, wrk -c%d -d%s", row.wait, row.system, row.workers, row.conns, dur)
	if p.warmup > 0 {
		if _, err := runWrk(l.ctx, url, row.conns, p.warmup); err != nil {
			return err
		}
	}
	for run := 0; run < p.runs; run++ {
		l.drain(s, 200*time.Millisecond) // what the last run left queued (PHP-FPM) is done
		if l.quietWait > 0 {
			l.waitQuiet(l.quietWait)
		}
		meter := startMeter(s)
		r, err := runWrk(l.ctx, url, row.conns, dur)
		if err != nil {
			return fmt.Errorf("%s, %s: %w", row.system, row.wait, err)
		}
		r.cpu, r.otherCores = meter.stop()
		logf("  run %d/%d %9.0f req/s (%.0f%% of %s)  p50 %-8s p99 %-8s server CPU/req %-8s other load %.2f cores  failed %d", run+1, p.runs, r.rps,
			100*r.rps/row.ceiling(), fmtRPS(row.ceiling()), fmtDur(r.p50), fmtDur(r.p99), fmtDur(r.cpuPerRequest()), r.otherCores, r.failed())
		row.runs = append(row.runs, r)
	}
	l.drain(s, 200*time.Millisecond)
	return nil
}

// startConcurrentPeregrine serves script with 4 workers of `slots` requests each; its URL is
// /sleep (the readiness check), or / for a script that answers every path alike.
func (l *lab) startConcurrentPeregrine(label, script string, slots int, env map[string]string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	id := l.name("peregrine-conc")
	var b strings.Builder
	fmt.Fprintf(&b, "http:\n  address: 127.0.0.1:%d\nworkers:\n  command: [php, %q]\n  dir: %q\n  count: %d\n  concurrency: %d\n",
		port, l.abs(script), l.root, concWorkers, slots)
	b.WriteString("  env:\n")
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&b, "    %s: %q\n", k, env[k])
	}
	b.WriteString("log:\n  level: warn\n")
	conf := filepath.Join(l.tmp, id+".yaml")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	daemon, err := l.start("peregrine", id, nil, syscall.SIGTERM, l.peregrine, "serve", "-c", conf)
	if err != nil {
		return nil, err
	}
	s := &server{name: label, url: fmt.Sprintf("http://127.0.0.1:%d/sleep", port), procs: []*proc{daemon}}
	return s, l.ready(s)
}

func firstNonEmpty(xs ...string) string {
	for _, x := range xs {
		if x != "" {
			return x
		}
	}
	return ""
}

// phpExtMissing says so when PHP's CLI lacks the extension.
func phpExtMissing(ext string) string {
	if err := exec.Command("php", "-r", "exit(extension_loaded('"+ext+"') ? 0 : 1);").Run(); err != nil {
		return "PHP extension " + ext + " not loaded (scripts/setup.sh installs it)"
	}
	return ""
}

// tcpMissing says so when nothing listens on addr.
func tcpMissing(what, addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return what + " not reachable on " + addr
	}
	_ = c.Close()
	return ""
}

func fileMissing(path, pkg string) string {
	if _, err := os.Stat(path); err != nil {
		return pkg + " not installed (" + path + ")"
	}
	return ""
}

// markdown writes the scenario's section.
func (c *concResult) markdown() string {
	if c == nil || len(c.rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Concurrent requests in one worker (issue 17)\n\n")
	b.WriteString("examples/concurrency: handlers that wait 50 ms, written the blocking way, on Peregrine with " +
		"`workers.concurrency` (every request a fiber; the wait suspends only it) and on nginx + PHP-FPM with 4 children " +
		"(the same code, fpm/index.php, persistent connections). The ceiling is what the connections (or the request slots, if fewer) allow at " +
		"50 ms a request. wrk, keep-alive. Server CPU / request: the daemon and workers (nginx and the FPM master and children); " +
		"other load: cores other processes kept busy, MariaDB and Redis included (they serve those rows).\n\n")
	b.WriteString("| handler waits on | system | workers | connections | req/s | of the ceiling | p50 | p99 | server CPU / request | other load | failed / requests | Peregrine ÷ FPM |\n" +
		"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, r := range c.rows {
		if r.skipped != "" {
			fmt.Fprintf(&b, "| %s | %s | %d | %d | not measured: %s | | | | | | | |\n", r.wait, r.system, r.workers, r.conns, strings.ReplaceAll(r.skipped, "|", "/"))
			continue
		}
		if len(r.runs) == 0 {
			continue
		}
		p50, p99 := make([]float64, len(r.runs)), make([]float64, len(r.runs))
		cpu, other := make([]float64, len(r.runs)), make([]float64, len(r.runs))
		failed, requests := 0, 0
		for k, x := range r.runs {
			p50[k], p99[k] = float64(x.p50), float64(x.p99)
			cpu[k], other[k] = float64(x.cpuPerRequest()), x.otherCores
			failed += x.failed()
			requests += x.requests
		}
		ratio := ""
		if r.system == sysFPM && i > 0 && c.rows[i-1].wait == r.wait && len(c.rows[i-1].runs) > 0 && r.medianRPS() > 0 {
			ratio = fmt.Sprintf("%.0f×", c.rows[i-1].medianRPS()/r.medianRPS())
		}
		slots := ""
		if r.slots > 1 {
			slots = fmt.Sprintf(" x %d", r.slots)
		}
		wait := r.wait
		if r.wait1 > 0 {
			wait += fmt.Sprintf(" (one BLPOP alone takes %s: Redis ends timeouts on its hz clock; the ceiling uses it)", fmtDur(r.wait1))
		}
		fmt.Fprintf(&b, "| %s | %s | %d%s | %d | %s | %.0f%% of %s | %s | %s | %s | %.2f | %d / %d | %s |\n", wait, r.system, r.workers, slots, r.conns,
			fmtRPS(r.medianRPS()), 100*r.medianRPS()/r.ceiling(), fmtRPS(r.ceiling()),
			fmtDur(time.Duration(median(p50))), fmtDur(time.Duration(median(p99))),
			fmtDur(time.Duration(median(cpu))), median(other), failed, requests, ratio)
	}
	b.WriteString("\n")
	return b.String()
}

// blpopTime is the median time of a few BLPOPs of an empty list with a 50 ms timeout, or 0.
func blpopTime() time.Duration {
	c, err := net.DialTimeout("tcp", "127.0.0.1:6379", time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	buf := make([]byte, 64)
	var ts []float64
	for i := 0; i < 5; i++ {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		if _, err := io.WriteString(c, "*3\r\n$5\r\nBLPOP\r\n$23\r\nperegrine-bench:empty:0\r\n$4\r\n0.05\r\n"); err != nil {
			return 0
		}
		if _, err := c.Read(buf); err != nil { // "*-1\r\n" at the timeout
			return 0
		}
		ts = append(ts, float64(time.Since(start)))
	}
	return time.Duration(median(ts))
}
