package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// A plan is how much of each scenario to run.
type plan struct {
	runs      int           // runs per system in each comparison, alternated A B A B
	warmup    time.Duration // load before each run, not measured
	quietWait time.Duration // how long to wait at most for other work on the machine to stop, before each run

	helloWorkers []int
	helloConns   int
	helloDur     time.Duration

	delayWorkers []int
	delayConns   []int
	delayDur     time.Duration
	abWorkers    []int // worker counts that also get `ab -n abN -c abC`
	abN, abC     int

	fwWorkers int
	fwDur     time.Duration

	memWorkers  []int
	memRequests int
	memConns    int

	classicWorkers int
	classicDur     time.Duration

	frontWorkers int
	frontDur     time.Duration
	frontConns   int // wrk's connections (compressed page, static files)
	h2Clients    int // h2load's connections (HTTPS hello) ...
	h2Streams    int // ... and requests in flight on each
}

func fullPlan() plan {
	return plan{
		runs: 3, warmup: time.Second, quietWait: 3 * time.Second,
		helloWorkers: []int{1, 2, 4}, helloConns: 50, helloDur: 8 * time.Second,
		delayWorkers: []int{4, 16}, delayConns: []int{100, 1000}, delayDur: 10 * time.Second,
		abWorkers: []int{16}, abN: 20000, abC: 1000,
		fwWorkers: 2, fwDur: 8 * time.Second,
		memWorkers: []int{2, 4}, memRequests: 100000, memConns: 50,
		classicWorkers: 2, classicDur: 8 * time.Second,
		frontWorkers: 2, frontDur: 8 * time.Second, frontConns: 50, h2Clients: 10, h2Streams: 5,
	}
}

func quickPlan() plan {
	return plan{
		runs: 1, warmup: time.Second,
		helloWorkers: []int{2}, helloConns: 50, helloDur: 3 * time.Second,
		delayWorkers: []int{16}, delayConns: []int{1000}, delayDur: 4 * time.Second,
		abWorkers: []int{16}, abN: 2000, abC: 1000,
		fwWorkers: 2, fwDur: 3 * time.Second,
		memWorkers: []int{4}, memRequests: 100000, memConns: 50,
		classicWorkers: 2, classicDur: 3 * time.Second,
		frontWorkers: 2, frontDur: 3 * time.Second, frontConns: 50, h2Clients: 10, h2Streams: 5,
	}
}

// scenarioNames lists what -only takes, in the order the scenarios run.
const scenarioNames = "hello, delay, framework, classic, front, memory, highloadcup, techempower, concurrency, jobs, websocket"

func validScenario(s string) bool {
	switch s {
	case "hello", "delay", "framework", "memory", "classic", "front", "highloadcup", "techempower", "concurrency", "jobs",
		"websocket":
		return true
	}
	return false
}

// A comparison is one cell of a table: several systems under the same load, measured in
// alternation (A B C A B C ...). runs[i][j] is run i of system j.
type comparison struct {
	workers int
	conns   int
	load    string // the load generator's command, for the table
	app     string // the framework app, in the framework scenario
	systems []string
	runs    [][]result
	// answers describes one answer of each system to the measured request (protocol, body
	// bytes as sent, Content-Encoding), in the front scenario.
	answers []string
}

// fpmBacklog is PHP-FPM's listen.backlog (and nginx's): the default, 511, makes the kernel refuse
// connections beyond it, which nginx answers with 502 at 1000 connections. 4096 is the kernel's
// somaxconn here, and what Peregrine's listener gets from Go.
const fpmBacklog = 4096

// compare measures each server in turn, runs times, calling before(s) first.
func (l *lab) compare(c *comparison, servers []*server, before func(*server) error, measure func(*server) (result, error)) error {
	for i := 0; i < len(servers); i++ {
		c.systems = append(c.systems, servers[i].name)
	}
	for run := 0; run < cap(c.runs); run++ {
		row := make([]result, len(servers))
		for j, s := range servers {
			if err := l.ctx.Err(); err != nil {
				return err
			}
			if l.quietWait > 0 {
				l.waitQuiet(l.quietWait)
			}
			if before != nil {
				if err := before(s); err != nil {
					return err
				}
			}
			meter := startMeter(s)
			r, err := measure(s)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			r.cpu, r.otherCores = meter.stop()
			if s.closes {
				r.closed, r.readErr = r.readErr, 0
			}
			row[j] = r
			extra := ""
			if r.aborted != "" {
				extra = " (ab gave up: " + r.aborted + ")"
			}
			logf("  run %d/%d %-26s %9.0f req/s  p50 %-8s p99 %-8s server CPU/req %-8s other load %.2f cores  failed %d%s",
				run+1, cap(c.runs), s.name, r.rps, fmtDur(r.p50), fmtDur(r.p99), fmtDur(r.cpuPerRequest()), r.otherCores, r.failed(), extra)
		}
		c.runs = append(c.runs, row)
	}
	return nil
}

func newComparison(runs, workers, conns int, load string) *comparison {
	return &comparison{workers: workers, conns: conns, load: load, runs: make([][]result, 0, runs)}
}

// startAll starts servers one after another; on an error it stops those already started.
func (l *lab) startAll(starts ...func() (*server, error)) ([]*server, error) {
	var out []*server
	for _, start := range starts {
		s, err := start()
		if err != nil {
			for _, s := range out {
				l.stopServer(s)
			}
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (l *lab) stopAllServers(servers []*server) {
	for _, s := range servers {
		l.stopServer(s)
	}
}

// Names of the systems, as the tables show them.
const (
	sysRaw     = "Peregrine raw"
	sysPSR     = "Peregrine PSR-7"
	sysFPM     = "nginx + PHP-FPM"
	sysPreload = "nginx + PHP-FPM + preload"
	sysPHPS    = "php -S"
	sysGo      = "Go net/http"
	sysPeregr  = "Peregrine"
	sysLean    = "Peregrine, php -n + OPcache"
	sysClassic = "Peregrine classic"
	sysFork    = "Peregrine, workers.fork"
	sysNative  = "Peregrine raw, native runtime"
	sysDirect  = "Peregrine direct" // http.direct: the workers answer HTTP themselves (docs/direct.md)
	sysCLI     = "Peregrine raw, cli runtime"
	sysCLIMem  = "Peregrine, cli runtime"
	sysNginx   = "nginx (static)"
)

// helloScenario: hello world on every system, wrk with keep-alive.
func (l *lab) helloScenario(p plan) ([]*comparison, error) {
	var out []*comparison
	for _, w := range p.helloWorkers {
		logf("hello world, %d workers, wrk -t%d -c%d -d%s", w, wrkThreads, p.helloConns, p.helloDur)
		servers, err := l.startAll(
			func() (*server, error) { return l.startPeregrine(sysRaw, "bench/apps/hello/raw.php", w, nil) },
			func() (*server, error) { return l.startPeregrine(sysPSR, "bench/apps/hello/psr.php", w, nil) },
			func() (*server, error) {
				return l.startPeregrineWith(sysDirect, peregrineOptions{script: "bench/apps/hello/raw.php", workers: w, direct: true})
			},
			func() (*server, error) {
				return l.startFPM(sysFPM, fpmOptions{docroot: "bench/apps/hello", workers: w, backlog: fpmBacklog})
			},
			func() (*server, error) { return l.startPHPServer(sysPHPS, "bench/apps/hello", w) },
			func() (*server, error) { return l.startGo(sysGo) },
		)
		if err != nil {
			return nil, err
		}
		c := newComparison(p.runs, w, p.helloConns, fmt.Sprintf("wrk -t%d -c%d -d%s (keep-alive)", wrkThreads, p.helloConns, p.helloDur))
		err = l.compare(c, servers, func(s *server) error {
			_, err := runWrk(l.ctx, s.url, p.helloConns, p.warmup)
			return err
		}, func(s *server) (result, error) {
			return runWrk(l.ctx, s.url, p.helloConns, p.helloDur)
		})
		l.stopAllServers(servers)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// delayScenario: a handler that sleeps 50 ms, against the limit workers / 0.05 s.
func (l *lab) delayScenario(p plan) ([]*comparison, error) {
	var out []*comparison
	for _, w := range p.delayWorkers {
		servers, err := l.startAll(
			func() (*server, error) { return l.startPeregrine(sysPeregr, "bench/apps/delay/worker.php", w, nil) },
			func() (*server, error) {
				return l.startPeregrineWith(sysDirect, peregrineOptions{script: "bench/apps/delay/worker.php", workers: w, direct: true})
			},
			func() (*server, error) {
				return l.startFPM(sysFPM, fpmOptions{docroot: "bench/apps/delay", workers: w, backlog: fpmBacklog})
			},
		)
		if err != nil {
			return nil, err
		}
		// Every run starts with the workers warm and nothing queued from the run before.
		settle := func(s *server) error {
			if _, err := runWrk(l.ctx, s.url, w, p.warmup); err != nil {
				return err
			}
			l.drain(s, 150*time.Millisecond)
			return l.ctx.Err()
		}
		for _, conns := range p.delayConns {
			logf("50 ms delay, %d workers, wrk -t%d -c%d -d%s", w, wrkThreads, conns, p.delayDur)
			c := newComparison(p.runs, w, conns, fmt.Sprintf("wrk -t%d -c%d -d%s (keep-alive)", wrkThreads, conns, p.delayDur))
			if err := l.compare(c, servers, settle, func(s *server) (result, error) {
				return runWrk(l.ctx, s.url, conns, p.delayDur)
			}); err != nil {
				l.stopAllServers(servers)
				return nil, err
			}
			out = append(out, c)
		}
		if contains(p.abWorkers, w) {
			load := fmt.Sprintf("ab -n %d -c %d", p.abN, p.abC)
			logf("50 ms delay, %d workers, %s", w, load)
			c := newComparison(p.runs, w, p.abC, load)
			if err := l.compare(c, servers, settle, func(s *server) (result, error) {
				return runAb(l.ctx, s.url, p.abN, p.abC, false)
			}); err != nil {
				l.stopAllServers(servers)
				return nil, err
			}
			out = append(out, c)
		}
		l.stopAllServers(servers)
	}
	return out, nil
}

// A framework app.
type framework struct {
	key, name string
	dir       string // the app's directory (public/index.php is FPM's front file); bench/apps/KEY when empty
	path      string // the route measured; "/" when empty
	// prepare runs before the servers start, with the app's runtime directory in env
	// (LARAVEL_RUNTIME_DIR, VAR_DIR).
	prepare string
}

func (fw framework) appDir() string {
	if fw.dir != "" {
		return fw.dir
	}
	return "bench/apps/" + fw.key
}

func frameworks() []framework {
	return []framework{
		{key: "slim", name: "Slim " + debVersion("php-slim")},
		{key: "laravel", name: "Laravel " + debVersion("php-laravel-framework") + " (--laravel, sandboxed)", prepare: "bench/apps/laravel/optimize.php"},
		{key: "symfony", name: "Symfony " + debVersion("php-symfony-framework-bundle") + " (--symfony, kernel reset)",
			dir: "examples/symfony", path: "/hello", prepare: "bench/apps/symfony-warmup.php"},
	}
}

// frameworkScenario: the same one-route app on a framework, booted once per Peregrine worker, and
// once per request under PHP-FPM with OPcache, with and without opcache.preload.
func (l *lab) frameworkScenario(p plan) ([]*comparison, error) {
	var out []*comparison
	for _, fw := range frameworks() {
		if why := fw.missing(); why != "" {
			logf("framework: %s skipped: %s", fw.name, why)
			continue
		}
		runtime := filepath.Join(l.tmp, fw.key+"-runtime")
		env := map[string]string{"LARAVEL_RUNTIME_DIR": runtime, "VAR_DIR": runtime}
		envList := []string{"LARAVEL_RUNTIME_DIR=" + runtime, "VAR_DIR=" + runtime}
		if fw.prepare != "" {
			if out, err := l.php(envList, fw.prepare); err != nil {
				return nil, fmt.Errorf("%s: %w\n%s", fw.prepare, err, out)
			}
		}
		preload, err := l.writePreload(fw, envList)
		if err != nil {
			return nil, err
		}
		docroot := fw.appDir() + "/public"
		servers, err := l.startAll(
			func() (*server, error) {
				switch fw.key {
				case "laravel":
					// What a user runs: peregrine serve --laravel, each request in the sandbox
					// that puts the application back as it was after boot (docs/frameworks.md).
					return l.startPeregrineWith(sysPeregr, peregrineOptions{script: "php/bin/laravel-worker.php",
						args: []string{l.abs("bench/apps/laravel")}, root: docroot, workers: p.fwWorkers, env: env})
				case "symfony":
					// What peregrine serve --symfony DIR sets up (cmd/peregrine/frameworks.go): the
					// app's own public/index.php through symfony/runtime with Peregrine's runtime,
					// the kernel reset between requests, in DIR, on the native runtime.
					return l.startPeregrineWith(sysPeregr, peregrineOptions{script: "php/bin/symfony-worker.php",
						args: []string{l.abs(fw.appDir())}, dir: fw.appDir(), root: docroot, runtime: "native",
						workers: p.fwWorkers, env: env, path: fw.path})
				}
				return l.startPeregrine(sysPeregr, "bench/apps/"+fw.key+"/worker.php", p.fwWorkers, env)
			},
			func() (*server, error) {
				return l.startFPM(sysFPM, fpmOptions{docroot: docroot, workers: p.fwWorkers, backlog: fpmBacklog, env: env, path: fw.path})
			},
			func() (*server, error) {
				return l.startFPM(sysPreload, fpmOptions{docroot: docroot, workers: p.fwWorkers, backlog: fpmBacklog, env: env, preload: preload, path: fw.path})
			},
		)
		if err != nil {
			return nil, err
		}
		for _, s := range servers {
			if body, err := l.get(s.url); err != nil || body != "Hello, world!" {
				l.stopAllServers(servers)
				return nil, fmt.Errorf("%s on %s: GET %s answered %.200q (%v), not \"Hello, world!\"", s.name, fw.name, s.url, body, err)
			}
		}
		logf("%s hello, %d workers, wrk -t%d -c%d -d%s", fw.name, p.fwWorkers, wrkThreads, p.helloConns, p.fwDur)
		c := newComparison(p.runs, p.fwWorkers, p.helloConns, fmt.Sprintf("wrk -t%d -c%d -d%s (keep-alive)", wrkThreads, p.helloConns, p.fwDur))
		c.app = fw.name
		err = l.compare(c, servers, func(s *server) error {
			_, err := runWrk(l.ctx, s.url, p.helloConns, p.warmup)
			return err
		}, func(s *server) (result, error) {
			return runWrk(l.ctx, s.url, p.helloConns, p.fwDur)
		})
		l.stopAllServers(servers)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// missing says why the framework's packages or app are not there, or "".
func (fw framework) missing() string {
	if fw.key != "symfony" {
		return ""
	}
	for _, f := range []string{"/usr/share/php/Symfony/Bundle/FrameworkBundle/autoload.php", "/usr/share/php/Symfony/Bundle/SecurityBundle/autoload.php",
		"/usr/share/php/Symfony/Component/Runtime/autoload.php", "/usr/share/php/Symfony/Component/Dotenv/autoload.php"} {
		if _, err := os.Stat(f); err != nil {
			return f + " not found (bench/setup.sh installs Debian's php-symfony-* packages)"
		}
	}
	return ""
}

// writePreload writes an opcache.preload script that requires every library file one request of
// the app loads (listed by bench/apps/preload-list.php), in the order it loads them.
func (l *lab) writePreload(fw framework, env []string) (string, error) {
	app := fw.key
	list, err := l.php(env, "bench/apps/preload-list.php", fw.appDir()+"/public/index.php", urlPath(fw.path))
	if err != nil {
		return "", fmt.Errorf("preload list of %s: %w\n%s", app, err, list)
	}
	var b strings.Builder
	b.WriteString("<?php\n// Generated by bench: the library files one request of the app loads.\n")
	n := 0
	for _, f := range strings.Split(strings.TrimSpace(list), "\n") {
		if strings.HasPrefix(f, "/usr/share/php/") && strings.HasSuffix(f, ".php") {
			fmt.Fprintf(&b, "require_once %q;\n", f)
			n++
		}
	}
	if n == 0 {
		return "", fmt.Errorf("preload list of %s is empty:\n%s", app, list)
	}
	path := filepath.Join(l.tmp, app+"-preload.php")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func (l *lab) php(env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(l.ctx, "php", args...)
	cmd.Dir = l.root
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A memRun is the memory of one server, idle after start and after the requests.
type memRun struct {
	system      string
	workers     int
	idle, after memSnap
	rps         float64
	failed      int
}

// memSnap: front is nginx (master and workers; zero for Peregrine), app is the Peregrine daemon
// and its workers, or the PHP-FPM master and its children.
type memSnap struct {
	front, app treeMem
}

func (m memSnap) totalRSS() int {
	return m.front.rootRSS + m.front.childRSS + m.app.rootRSS + m.app.childRSS
}
func (m memSnap) totalPSS() int {
	return m.front.rootPSS + m.front.childPSS + m.app.rootPSS + m.app.childPSS
}
func (m memSnap) workerRSS() int {
	if m.app.children == 0 {
		return 0
	}
	return m.app.childRSS / m.app.children
}

func (m memSnap) workerPSS() int {
	if m.app.children == 0 {
		return 0
	}
	return m.app.childPSS / m.app.children
}

func snapshot(s *server) memSnap {
	if len(s.procs) == 2 { // nginx, php-fpm
		return memSnap{front: measureTree(s.procs[0].pid()), app: measureTree(s.procs[1].pid())}
	}
	return memSnap{app: measureTree(s.procs[0].pid())}
}

// memoryScenario: RSS of each whole server idle and after memRequests hello-world requests, at
// equal worker counts; each run starts the servers afresh, alternating.
func (l *lab) memoryScenario(p plan) ([][]memRun, error) {
	var out [][]memRun
	for _, w := range p.memWorkers {
		logf("memory, %d workers, ab -k -n %d -c %d", w, p.memRequests, p.memConns)
		starts := []func() (*server, error){
			func() (*server, error) { return l.startPeregrine(sysPeregr, "bench/apps/hello/raw.php", w, nil) },
			// The same, its workers forked from one template process (workers.fork).
			func() (*server, error) {
				return l.startPeregrineWith(sysFork, peregrineOptions{script: "bench/apps/hello/raw.php", workers: w, fork: true})
			},
			func() (*server, error) {
				return l.startFPM(sysFPM, fpmOptions{docroot: "bench/apps/hello", workers: w, backlog: fpmBacklog})
			},
			// The same worker on the cli runtime (plain php), and without php.ini and the extensions
			// Debian enables in it: OPcache only.
			func() (*server, error) {
				return l.startPeregrineWith(sysCLIMem, peregrineOptions{script: "bench/apps/hello/raw.php", runtime: "cli", workers: w})
			},
			func() (*server, error) {
				return l.startPeregrineWith(sysLean, peregrineOptions{script: "bench/apps/hello/raw.php", runtime: "cli", workers: w,
					phpArgs: []string{"-n", "-d", "zend_extension=opcache.so"}})
			},
			// Classic mode: peregrine-php without a script, each request a PHP request (hello/index.php).
			func() (*server, error) {
				return l.startPeregrineWith(sysClassic, peregrineOptions{root: "bench/apps/hello", workers: w, phpIni: classicIni})
			},
		}
		for run := 0; run < p.runs; run++ {
			var row []memRun
			for _, start := range starts {
				s, err := start()
				if err != nil {
					return nil, err
				}
				m := memRun{system: s.name, workers: w}
				time.Sleep(time.Second)
				m.idle = snapshot(s)
				r, err := runAb(l.ctx, s.url, p.memRequests, p.memConns, true)
				if err != nil {
					l.stopServer(s)
					return nil, err
				}
				time.Sleep(time.Second)
				m.after = snapshot(s)
				m.rps, m.failed = r.rps, r.failed()
				l.stopServer(s)
				logf("  run %d/%d %-16s idle %6.1f MiB  after %6.1f MiB (per worker %5.1f -> %5.1f MiB)  failed %d",
					run+1, p.runs, s.name, mib(m.idle.totalRSS()), mib(m.after.totalRSS()),
					mib(m.idle.workerRSS()), mib(m.after.workerRSS()), m.failed)
				row = append(row, m)
			}
			out = append(out, row)
		}
	}
	return out, nil
}

func mib(kib int) float64 { return float64(kib) / 1024 }

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// classicScenario: classic mode (each request a fresh PHP request on the native runtime, as
// under PHP-FPM) against nginx + PHP-FPM on hello world and on WordPress's front page, and worker
// mode on the native runtime against the cli runtime on hello world (raw mode). OPcache is on
// everywhere, without timestamp checks for the classic servers.
func (l *lab) classicScenario(p plan) ([]*comparison, error) {
	w := p.classicWorkers
	loadOf := func(conns int) string {
		return fmt.Sprintf("wrk -t%d -c%d -d%s (keep-alive)", wrkThreads, conns, p.classicDur)
	}
	load := loadOf(p.helloConns)
	// Every run starts with nothing queued from the warm-up or the run before: requests whose
	// client went away are still run by PHP-FPM (nginx has passed them on), while Peregrine drops
	// those that had not reached PHP. With WordPress's tens of milliseconds per request, 50
	// abandoned requests would be seconds of FPM's next run.
	measureAt := func(c *comparison, servers []*server, conns int, settled time.Duration) error {
		return l.compare(c, servers, func(s *server) error {
			if _, err := runWrk(l.ctx, s.url, conns, p.warmup); err != nil {
				return err
			}
			l.drain(s, settled)
			return l.ctx.Err()
		}, func(s *server) (result, error) {
			return runWrk(l.ctx, s.url, conns, p.classicDur)
		})
	}
	measure := func(c *comparison, servers []*server) error {
		return measureAt(c, servers, p.helloConns, 50*time.Millisecond)
	}
	var out []*comparison
	cells := []struct {
		app    string
		starts []func() (*server, error)
	}{
		{"hello world (index.php)", []func() (*server, error){
			func() (*server, error) {
				return l.startPeregrineWith(sysClassic, peregrineOptions{root: "bench/apps/hello", workers: w, phpIni: classicIni})
			},
			func() (*server, error) {
				return l.startFPM(sysFPM, fpmOptions{docroot: "bench/apps/hello", workers: w, backlog: fpmBacklog})
			},
		}},
		{"hello world, worker mode (raw.php)", []func() (*server, error){
			func() (*server, error) {
				return l.startPeregrineWith(sysNative, peregrineOptions{script: "bench/apps/hello/raw.php", runtime: "native", workers: w})
			},
			func() (*server, error) {
				return l.startPeregrineWith(sysCLI, peregrineOptions{script: "bench/apps/hello/raw.php", runtime: "cli", workers: w})
			},
		}},
	}
	for _, cell := range cells {
		logf("classic: %s, %d workers, %s", cell.app, w, load)
		servers, err := l.startAll(cell.starts...)
		if err != nil {
			return nil, err
		}
		c := newComparison(p.runs, w, p.helloConns, load)
		c.app = cell.app
		err = measure(c, servers)
		l.stopAllServers(servers)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}

	if why := wordpressMissing(); why != "" {
		logf("classic: WordPress front page skipped: %s", why)
		return out, nil
	}
	site, err := l.prepareWordPress()
	if err != nil {
		return nil, err
	}
	defer site.drop()
	app := "WordPress " + site.version + " front page"
	// Two connections per worker keep every worker busy with one request waiting; more would
	// only lengthen the queue (a front page takes tens of milliseconds).
	wpConns := 2 * w
	logf("classic: %s, %d workers, %s", app, w, loadOf(wpConns))
	servers, err := l.startAll(
		func() (*server, error) {
			return l.startPeregrineWith(sysClassic, peregrineOptions{root: site.dir, workers: w, phpIni: classicIni})
		},
		func() (*server, error) {
			return l.startFPM(sysFPM, fpmOptions{docroot: site.dir, workers: w, backlog: fpmBacklog, tryFiles: true})
		},
	)
	if err != nil {
		return nil, err
	}
	c := newComparison(p.runs, w, wpConns, loadOf(wpConns))
	c.app = app
	err = measureAt(c, servers, wpConns, time.Second)
	l.stopAllServers(servers)
	if err != nil {
		return nil, err
	}
	return append(out, c), nil
}
