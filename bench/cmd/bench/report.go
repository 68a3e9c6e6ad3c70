package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/peregrinephp/peregrine/bench/wsload"
)

// report holds everything measured, and writes it as markdown and as a chart.
type report struct {
	plan      plan
	quick     bool
	machine   machine
	started   time.Time
	elapsed   time.Duration
	hello     []*comparison
	delay     []*comparison
	framework []*comparison
	classic   []*comparison
	front     []*comparison
	memory    [][]memRun // one row per run: the systems in the order they ran

	highloadcup *hlcResult    // highloadcup.go
	techempower []*comparison // techempower.go
	concurrency *concResult   // concurrency.go
	jobs        *jobsResult   // jobsbench.go

	websocket *wsload.Result // websocket.go
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// column returns f of system j over the runs of c.
func (c *comparison) column(j int, f func(result) float64) []float64 {
	out := make([]float64, len(c.runs))
	for i, row := range c.runs {
		out[i] = f(row[j])
	}
	return out
}

func (c *comparison) index(system string) int {
	for j, s := range c.systems {
		if s == system {
			return j
		}
	}
	return -1
}

func (c *comparison) medianRPS(j int) float64 {
	return median(c.column(j, func(r result) float64 { return r.rps }))
}

// ratio is the median over the runs of system a's req/s divided by system b's in the same run.
func (c *comparison) ratio(a, b int) float64 {
	out := make([]float64, 0, len(c.runs))
	for _, row := range c.runs {
		if row[b].rps > 0 {
			out = append(out, row[a].rps/row[b].rps)
		}
	}
	return median(out)
}

// cpuRatio is the median over the runs of system b's server CPU per request divided by system
// a's in the same run: how many times less CPU a needs per request. Other work on the machine
// moves it less than req/s.
func (c *comparison) cpuRatio(a, b int) float64 {
	out := make([]float64, 0, len(c.runs))
	for _, row := range c.runs {
		if ca, cb := row[a].cpuPerRequest(), row[b].cpuPerRequest(); ca > 0 && cb > 0 {
			out = append(out, float64(cb)/float64(ca))
		}
	}
	return median(out)
}

func (c *comparison) failed(j int) (failed, requests int, aborted string) {
	for _, row := range c.runs {
		failed += row[j].failed()
		requests += row[j].requests + row[j].sockErr + row[j].readErr
		if row[j].aborted != "" {
			aborted = row[j].aborted
		}
	}
	return failed, requests, aborted
}

// otherLoad is the median of the cores other work kept busy during system j's runs.
func (c *comparison) otherLoad(j int) string {
	return fmt.Sprintf("%.2f", median(c.column(j, func(r result) float64 { return r.otherCores })))
}

func (c *comparison) medianDur(j int, f func(result) time.Duration) time.Duration {
	return time.Duration(median(c.column(j, func(r result) float64 { return float64(f(r)) })))
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < 10*time.Microsecond:
		// Tenths: a server's CPU a request is a few µs, and a whole µs is a tenth of it.
		return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func fmtRPS(v float64) string {
	if v >= 100 {
		return groupThousands(int(v + 0.5))
	}
	return fmt.Sprintf("%.1f", v)
}

func groupThousands(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func fmtFailed(c *comparison, j int) string {
	failed, total, aborted := c.failed(j)
	s := fmt.Sprintf("%s / %s", groupThousands(failed), groupThousands(total))
	if aborted != "" {
		s += " (ab gave up: " + strings.ReplaceAll(aborted, "|", "/") + ")"
	}
	return s
}

// A target is one of issue #3's goals and the figure this run got.
type target struct {
	what, figure string
	met          bool
}

func (r *report) markdown() string {
	var b strings.Builder
	mode := "full"
	if r.quick {
		mode = "quick (`QUICK=1`: one short pass, for development; not for quoting)"
	}
	fmt.Fprintf(&b, "# Peregrine benchmark results\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (bench/cmd/bench) on %s UTC; mode: %s; took %s.\n\n",
		r.started.UTC().Format("2006-01-02 15:04"), mode, r.elapsed.Round(time.Second))
	fmt.Fprintf(&b, "**Machine:** %d cores, %s, %s RAM, Linux %s; load average at the start %s.\n\n",
		r.machine.cores, r.machine.cpu, r.machine.memory, r.machine.kernel, r.machine.loadavg)
	b.WriteString("| software | version |\n|---|---|\n")
	for _, v := range r.machine.versions {
		fmt.Fprintf(&b, "| %s | %s |\n", v[0], strings.ReplaceAll(v[1], "|", "/"))
	}
	fmt.Fprintf(&b, "\nEverything runs on this one machine over loopback: the load generator (wrk -t%d, or ab) "+
		"shares the cores with the server. Each comparison alternates the systems run by run "+
		"(A B C A B C …, %d run(s) each, a %s warm-up before each run); the tables show medians, and each ratio is "+
		"the median of the ratios taken within the same run. \"failed\" counts non-2xx/3xx answers, socket "+
		"errors and timeouts over all runs. \"server CPU / request\" is the user + system CPU time of all the "+
		"server's processes (daemon and workers; nginx, the FPM master and children) during the run, divided by "+
		"the requests answered: it depends less than req/s on what else the machine is doing. \"other load\" is "+
		"how many cores, on average, processes other than the server and the load generator kept busy during the "+
		"runs (median).", wrkThreads, r.plan.runs, r.plan.warmup)
	if r.plan.quietWait > 0 {
		fmt.Fprintf(&b, " Before each run the benchmark waits up to %s for the machine to be quiet.", r.plan.quietWait)
	}
	b.WriteString("\n\n")

	if targets := r.targets(); len(targets) > 0 {
		b.WriteString("## Targets (issue #3)\n\n| target | this run | met |\n|---|---|---|\n")
		for _, t := range targets {
			met := "**missed**"
			if t.met {
				met = "yes"
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", t.what, t.figure, met)
		}
		b.WriteString("\n")
	}

	if len(r.hello) > 0 {
		b.WriteString("## 1. Hello world\n\n")
		fmt.Fprintf(&b, "`GET /` answering `Hello, world!` (text/plain). Load: %s.\n\n", r.hello[0].load)
		b.WriteString("| workers | system | req/s | p50 | p99 | server CPU / request | other load | failed / requests | Peregrine raw ÷ this |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range r.hello {
			for j, s := range c.systems {
				workers := fmt.Sprint(c.workers)
				if s == sysGo {
					workers = "–"
				}
				ratio := "–"
				if j > 0 {
					ratio = fmt.Sprintf("%.2f×", c.ratio(0, j))
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", workers, s, fmtRPS(c.medianRPS(j)),
					fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p50 })),
					fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p99 })),
					fmtDur(c.medianDur(j, result.cpuPerRequest)), c.otherLoad(j), fmtFailed(c, j), ratio)
			}
		}
		b.WriteString("\n`php -S` (PHP_CLI_SERVER_WORKERS processes) has no keep-alive: it closes the connection after " +
			"every answer, which wrk reports as a read error; those are not counted as failures.\n\n")
	}

	if len(r.delay) > 0 {
		b.WriteString("## 2. 50 ms delay\n\n")
		b.WriteString("The handler sleeps 50 ms (`usleep(50000)`), so N workers can answer at most N / 0.05 s = 20·N req/s.\n\n")
		b.WriteString("| workers | load | system | req/s | of the limit | p50 | p99 | failed / requests | Peregrine ÷ this |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range r.delay {
			limit := float64(c.workers) / 0.05
			for j, s := range c.systems {
				ratio := "–"
				if j > 0 {
					ratio = fmt.Sprintf("%.2f×", c.ratio(0, j))
				}
				rps := c.medianRPS(j)
				fmt.Fprintf(&b, "| %d | %s | %s | %s | %.1f%% | %s | %s | %s | %s |\n", c.workers, c.load, s, fmtRPS(rps),
					100*rps/limit, fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p50 })),
					fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p99 })), fmtFailed(c, j), ratio)
			}
		}
		b.WriteString("\n")
	}

	if len(r.framework) > 0 {
		b.WriteString("## 3. A framework app\n\n")
		fmt.Fprintf(&b, "One route answering `Hello, world!` (`GET /`; Symfony: `GET /hello` of examples/symfony), on frameworks from Debian's packages; %d workers; load: %s. "+
			"Peregrine boots the app once per worker; PHP-FPM boots it for every request, with OPcache, "+
			"and with `opcache.preload` of every library file a request loads.\n\n", r.framework[0].workers, r.framework[0].load)
		b.WriteString("| app | system | req/s | p50 | p99 | server CPU / request | other load | failed / requests | Peregrine ÷ this |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range r.framework {
			for j, s := range c.systems {
				ratio := "–"
				if j > 0 {
					ratio = fmt.Sprintf("%.2f×", c.ratio(0, j))
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.app, s, fmtRPS(c.medianRPS(j)),
					fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p50 })),
					fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p99 })),
					fmtDur(c.medianDur(j, result.cpuPerRequest)), c.otherLoad(j), fmtFailed(c, j), ratio)
			}
		}
		b.WriteString("\n")
	}

	if len(r.memory) > 0 {
		b.WriteString("## 4. Memory\n\n")
		fmt.Fprintf(&b, "Resident memory (VmRSS summed over the process tree) of the hello-world server just after start "+
			"(idle) and after `ab -k -n %d -c %d`; each run starts the servers afresh. For nginx + PHP-FPM the whole server is "+
			"nginx (master and workers) plus the FPM master and children; \"daemon / master\" is the Peregrine daemon or the "+
			"FPM master (with `workers.fork`, the daemon and the template the workers are forked from). RSS counts shared pages (the OPcache segment, the PHP binary) once per process; PSS divides "+
			"them among the processes that share them.\n\n", r.plan.memRequests, r.plan.memConns)
		b.WriteString("| workers | system | whole server idle | whole server after | nginx after | daemon / master after | per worker idle | per worker after | per worker PSS idle | whole server PSS idle → after |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, g := range r.memoryGroups() {
			f := func(get func(memRun) int) string { return fmt.Sprintf("%.1f MiB", mib(medianInt(g, get))) }
			nginx := "–"
			if g[0].after.front.rootRSS > 0 {
				nginx = f(func(m memRun) int { return m.after.front.rootRSS + m.after.front.childRSS })
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s → %s |\n", g[0].workers, g[0].system,
				f(func(m memRun) int { return m.idle.totalRSS() }), f(func(m memRun) int { return m.after.totalRSS() }), nginx,
				f(func(m memRun) int { return m.after.app.rootRSS }),
				f(func(m memRun) int { return m.idle.workerRSS() }), f(func(m memRun) int { return m.after.workerRSS() }),
				f(func(m memRun) int { return m.idle.workerPSS() }),
				f(func(m memRun) int { return m.idle.totalPSS() }), f(func(m memRun) int { return m.after.totalPSS() }))
		}
		fmt.Fprintf(&b, "\n\"%s\" is the raw hello-world worker on the default runtime, native (`bin/peregrine-php`); \"%s\" "+
			"the same worker on plain `php`; \"%s\" the same on plain `php -n -d zend_extension=opcache.so`: without "+
			"php.ini and the extensions Debian's PHP CLI loads from it. \"%s\" is classic mode (`--root bench/apps/hello`, "+
			"each request a PHP request of index.php), the same work as an FPM child's. \"%s\" is the first with `workers.fork: true`: "+
			"its workers are forked from one template process that has started PHP, and share its OPcache and startup memory "+
			"copy-on-write, as FPM's children share the master's.\n\n", sysPeregr, sysCLIMem, sysLean, sysClassic, sysFork)
	}
	if len(r.classic) > 0 {
		b.WriteString("## 5. Classic mode and the native runtime\n\n")
		fmt.Fprintf(&b, "Classic mode (`peregrine serve --root DIR`): every request is a fresh PHP request on the native "+
			"runtime (`bin/peregrine-php`), PHP-FPM's model without the FastCGI hop and without nginx; static files are "+
			"served by the daemon. Against nginx + PHP-FPM on the same `index.php`, and on WordPress's front page "+
			"(Debian's `wordpress` package with its default theme, the default content, pretty permalinks; nginx with "+
			"`try_files $uri $uri/ /index.php?$query_string` and Debian's `snippets/fastcgi-php.conf`), and on MediaWiki's "+
			"main page (Debian's `mediawiki` package, installed with SQLite by `bench/apps/mediawiki/install.sh`, the same "+
			"nginx site). OPcache on for "+
			"both, `opcache.validate_timestamps=0` and 128 MiB for both. Then worker mode (raw, `bench/apps/hello/raw.php`) "+
			"on the native runtime against the cli runtime (plain `php`). %d workers. Before each run the servers get a warm-up "+
			"and then nothing queued (a lone request answered quickly), as in the delay scenario.\n\n", r.classic[0].workers)
		b.WriteString("| app | load | system | req/s | p50 | p99 | server CPU / request | other load | failed / requests | first ÷ this |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range r.classic {
			for j, s := range c.systems {
				ratio := "–"
				if j > 0 {
					ratio = fmt.Sprintf("%.2f×", c.ratio(0, j))
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.app, c.load, s, fmtRPS(c.medianRPS(j)),
					fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p50 })),
					fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p99 })),
					fmtDur(c.medianDur(j, result.cpuPerRequest)), c.otherLoad(j), fmtFailed(c, j), ratio)
			}
		}
		b.WriteString("\n")
	}

	if len(r.front) > 0 {
		r.frontMarkdown(&b)
	}
	b.WriteString(r.highloadcup.markdown())
	techempowerMarkdown(&b, r.techempower)
	b.WriteString(r.concurrency.markdown())
	b.WriteString(r.jobs.markdown())
	b.WriteString(websocketMarkdown(r.websocket))

	return b.String()
}

// fmtCPURatio says how many times less (or more) CPU per request the first system needs than
// the other, from cpuRatio.
func fmtCPURatio(v float64) string {
	switch {
	case v <= 0:
		return "–"
	case v >= 1:
		return fmt.Sprintf("%.2f× less", v)
	default:
		return fmt.Sprintf("%.2f× more", 1/v)
	}
}

// frontMarkdown writes the front scenario's section (issue 11).
func (r *report) frontMarkdown(b *strings.Builder) {
	b.WriteString("## 6. The HTTP front (issue 11)\n\n")
	fmt.Fprintf(b, "What Peregrine does in front of PHP, against nginx doing the same, %d workers. **HTTPS hello**: "+
		"`bench/apps/hello` over TLS with one self-signed ECDSA P-256 certificate for both, generated at start; Peregrine "+
		"with `http.tls.cert`/`key` (Go's crypto/tls defaults), nginx with `listen ... ssl http2` and the same protocols, "+
		"suites and curves (TLS 1.3, AES-128-GCM, X25519 in practice). h2load reports no percentiles: the p50 column "+
		"shows its mean time per request. **Compressed page**: a 20 KB HTML table made by PHP per request "+
		"(`bench/apps/front`), Peregrine with its default `http.compression` (zstd, br, gzip; gzip at level 5), nginx with "+
		"`gzip on; gzip_comp_level 5; gzip_types text/html`. **Static files**: the same page as a file and 1 MB of random "+
		"bytes from Peregrine's `http.root` (a hello-world worker running; no PHP involved) and from nginx alone "+
		"(`sendfile on`). \"answer\" is one answer of each server to the measured request: protocol, body bytes as sent, "+
		"coding.\n\n", r.front[0].workers)
	b.WriteString("| what | load | system | answer | req/s | p50 | p99 | server CPU / request | other load | failed / requests | first ÷ this |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.front {
		for j, s := range c.systems {
			ratio := "–"
			if j > 0 {
				ratio = fmt.Sprintf("%.2f× (CPU/request %s)", c.ratio(0, j), fmtCPURatio(c.cpuRatio(0, j)))
			}
			answer := ""
			if j < len(c.answers) {
				answer = c.answers[j]
			}
			p50 := fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p50 }))
			if mean := c.medianDur(j, func(r result) time.Duration { return r.mean }); mean > 0 {
				p50 = "mean " + fmtDur(mean)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.app, c.load, s, answer, fmtRPS(c.medianRPS(j)), p50,
				fmtDur(c.medianDur(j, func(r result) time.Duration { return r.p99 })),
				fmtDur(c.medianDur(j, result.cpuPerRequest)), c.otherLoad(j), fmtFailed(c, j), ratio)
		}
	}
	b.WriteString("\n")
}

// memoryGroups gathers the memory runs by workers and system, in the order they first ran.
func (r *report) memoryGroups() [][]memRun {
	var keys []string
	groups := map[string][]memRun{}
	for _, row := range r.memory {
		for _, m := range row {
			k := fmt.Sprintf("%d/%s", m.workers, m.system)
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], m)
		}
	}
	out := make([][]memRun, len(keys))
	for i, k := range keys {
		out[i] = groups[k]
	}
	return out
}

func medianInt(ms []memRun, get func(memRun) int) int {
	xs := make([]float64, len(ms))
	for i, m := range ms {
		xs[i] = float64(get(m))
	}
	return int(median(xs))
}

func (r *report) findHello(workers int) *comparison {
	for _, c := range r.hello {
		if c.workers == workers {
			return c
		}
	}
	return nil
}

// targets checks the figures against issue #3's goals.
func (r *report) targets() []target {
	var ts []target
	if c := r.findHello(2); c != nil {
		raw, fpm, psr, gohttp := c.index(sysRaw), c.index(sysFPM), c.index(sysPSR), c.index(sysGo)
		if fpm >= 0 {
			v := c.ratio(raw, fpm)
			ts = append(ts, target{"hello world raw ≥ 2× nginx + PHP-FPM (2 workers)", fmt.Sprintf("%.2f×", v), v >= 2})
		}
		if gohttp >= 0 {
			v := c.ratio(raw, gohttp)
			ts = append(ts, target{"hello world raw ≥ 0.5× pure Go", fmt.Sprintf("%.2f×", v), v >= 0.5})
		}
		if psr >= 0 {
			v := c.ratio(psr, raw)
			ts = append(ts, target{"PSR-7 mode within 25% of raw (PSR-7 ÷ raw ≥ 0.75)", fmt.Sprintf("%.2f×", v), v >= 0.75})
		}
	}
	failed, requests := 0, 0
	for _, c := range r.delay {
		if c.conns >= 1000 && strings.HasPrefix(c.load, "wrk") {
			v := c.medianRPS(0) / (float64(c.workers) / 0.05)
			ts = append(ts, target{fmt.Sprintf("50 ms delay, %d workers, 1000 connections: ≥ 97%% of %d req/s", c.workers, c.workers*20),
				fmt.Sprintf("%.1f%%", 100*v), v >= 0.97})
		}
		f, n, _ := c.failed(0)
		failed += f
		requests += n
	}
	if len(r.delay) > 0 {
		ts = append(ts, target{"50 ms delay: Peregrine fails no request (every load)", fmt.Sprintf("%d of %s failed", failed, groupThousands(requests)), failed == 0})
	}
	for _, c := range r.framework {
		// Slim's target is issue 3's, Laravel's issue 10's; issue 10 sets none for Symfony.
		want := 3.0
		switch {
		case strings.HasPrefix(c.app, "Laravel"):
			want = 8
		case !strings.HasPrefix(c.app, "Slim"):
			continue
		}
		if j := c.index(sysPreload); j >= 0 {
			v := c.ratio(0, j)
			ts = append(ts, target{fmt.Sprintf("%s hello ≥ %.0f× nginx + PHP-FPM with OPcache and preload", c.app, want), fmt.Sprintf("%.2f×", v), v >= want})
		}
		if strings.HasPrefix(c.app, "Laravel") {
			// Issue 10's targets for --laravel: ≥ 8× FPM with OPcache, ≥ 4× with preload too.
			for _, t := range []struct {
				system string
				want   float64
			}{{sysFPM, 8}, {sysPreload, 4}} {
				if j := c.index(t.system); j >= 0 {
					v := c.ratio(0, j)
					ts = append(ts, target{fmt.Sprintf("%s hello ≥ %.0f× %s (issue 10)", c.app, t.want, t.system), fmt.Sprintf("%.2f×", v), v >= t.want})
				}
			}
		}
	}
	for _, c := range r.classic {
		if len(c.systems) < 2 {
			continue
		}
		v := c.ratio(0, 1)
		figure := fmt.Sprintf("%.2f× (server CPU per request: %.2f× less)", v, c.cpuRatio(0, 1))
		switch {
		case c.systems[1] == sysFPM && strings.HasPrefix(c.app, "WordPress"):
			ts = append(ts, target{fmt.Sprintf("classic mode, %s ≥ 1.0× nginx + PHP-FPM (issue 12)", c.app), figure, v >= 1})
		case c.systems[1] == sysFPM && strings.HasPrefix(c.app, "MediaWiki"):
			ts = append(ts, target{fmt.Sprintf("classic mode, %s ≥ 1.0× nginx + PHP-FPM (issue 16)", c.app), figure, v >= 1})
		case c.systems[1] == sysFPM:
			ts = append(ts, target{"classic mode, hello world ≥ 1.5× nginx + PHP-FPM (issue 12)", figure, v >= 1.5})
		case c.systems[1] == sysCLI:
			ts = append(ts, target{"worker mode, native runtime ≥ 1.0× cli runtime, hello raw (issue 12)", figure, v >= 1})
		}
	}
	for _, c := range r.front {
		if len(c.systems) < 2 {
			continue
		}
		v := c.ratio(0, 1)
		figure := fmt.Sprintf("%.2f× (server CPU per request: %s)", v, fmtCPURatio(c.cpuRatio(0, 1)))
		switch {
		case strings.HasPrefix(c.app, "hello world, HTTPS"):
			ts = append(ts, target{fmt.Sprintf("%s ≥ 2× nginx + PHP-FPM (issue 11)", c.app), figure, v >= 2})
		case strings.HasPrefix(c.app, "static file"):
			ts = append(ts, target{fmt.Sprintf("%s ≥ 0.8× nginx (issue 11)", c.app), figure, v >= 0.8})
		}
	}
	for _, g := range r.memoryGroups() {
		if g[0].system == sysClassic || g[0].system == sysPeregr || g[0].system == sysFork {
			for _, h := range r.memoryGroups() {
				if h[0].system == sysFPM && h[0].workers == g[0].workers {
					pw := medianInt(g, func(m memRun) int { return m.idle.workerPSS() })
					fw := medianInt(h, func(m memRun) int { return m.idle.workerPSS() })
					ts = append(ts, target{fmt.Sprintf("idle worker PSS, %s ≤ PHP-FPM child's (%d workers; issue 12: reported)", g[0].system, g[0].workers),
						fmt.Sprintf("%.1f vs %.1f MiB", mib(pw), mib(fw)), pw <= fw})
				}
			}
		}
		if g[0].system != sysPeregr {
			continue
		}
		daemon := medianInt(g, func(m memRun) int { return max(m.idle.app.rootRSS, m.after.app.rootRSS) })
		ts = append(ts, target{fmt.Sprintf("daemon < 20 MiB RSS (%d workers, idle and after %d requests)", g[0].workers, r.plan.memRequests),
			fmt.Sprintf("%.1f MiB", mib(daemon)), daemon < 20*1024})
		for _, h := range r.memoryGroups() {
			if h[0].system == sysFPM && h[0].workers == g[0].workers {
				pw := medianInt(g, func(m memRun) int { return m.idle.workerRSS() })
				fw := medianInt(h, func(m memRun) int { return m.idle.workerRSS() })
				ts = append(ts, target{fmt.Sprintf("idle worker RSS ≤ PHP-FPM child's (%d workers)", g[0].workers),
					fmt.Sprintf("%.1f vs %.1f MiB", mib(pw), mib(fw)), pw <= fw})
			}
		}
		if g[0].workers == 4 {
			total := medianInt(g, func(m memRun) int { return max(m.idle.totalRSS(), m.after.totalRSS()) })
			ts = append(ts, target{"whole server with 4 workers < 80 MiB RSS", fmt.Sprintf("%.1f MiB", mib(total)), total < 80*1024})
		}
	}
	return ts
}

// A bar of the chart.
type bar struct {
	label string // "|" breaks the line
	value float64
	top   string // printed just above the bar
	ratio string // printed above that
	color int    // 0xRRGGBB
}

func systemColor(s string) int {
	switch {
	case strings.HasPrefix(s, "Peregrine"):
		if s == sysPSR {
			return 0x6baed6
		}
		return 0x1f5fa8
	case s == sysPreload:
		return 0xd62728
	case s == sysFPM || s == sysNginx:
		return 0xff8c1a
	case s == sysGo:
		return 0x2ca02c
	default:
		return 0x8c8c8c
	}
}

func shortName(s string) string {
	return map[string]string{sysRaw: "Peregrine|raw", sysPSR: "Peregrine|PSR-7", sysFPM: "nginx +|PHP-FPM",
		sysPreload: "PHP-FPM|+ preload", sysPHPS: "php -S", sysGo: "Go|net/http", sysPeregr: "Peregrine",
		sysDirect: "Peregrine|direct"}[s]
}

func kilo(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// panels are the chart's plots: one per scenario that ran.
func (r *report) panels() (titles []string, panels [][]bar) {
	hello := r.findHello(2)
	if hello == nil && len(r.hello) > 0 {
		hello = r.hello[0]
	}
	if hello != nil {
		var bars []bar
		for j, s := range hello.systems {
			ratio := ""
			if j > 0 {
				ratio = fmt.Sprintf("%.2f×", hello.ratio(0, j))
			}
			bars = append(bars, bar{shortName(s), hello.medianRPS(j), kilo(hello.medianRPS(j)), ratio, systemColor(s)})
		}
		titles = append(titles, fmt.Sprintf("Hello world, %d workers, %d connections|(× = Peregrine raw ÷ this)", hello.workers, hello.conns))
		panels = append(panels, bars)
	}
	var delay []bar
	for _, c := range r.delay {
		if c.conns < 1000 {
			continue
		}
		tool := "wrk"
		if strings.HasPrefix(c.load, "ab") {
			tool = "ab"
		}
		for j, s := range c.systems {
			rps := c.medianRPS(j)
			top := fmt.Sprintf("%.0f%%", 100*rps/(float64(c.workers)/0.05))
			ratio := ""
			if j > 0 {
				ratio = fmt.Sprintf("%.2f×", c.ratio(0, j))
			}
			name := "Peregrine"
			if j > 0 {
				name = "FPM"
			}
			delay = append(delay, bar{fmt.Sprintf("%s|%dw %s", name, c.workers, tool), rps, top, ratio, systemColor(s)})
		}
	}
	if len(delay) > 0 {
		titles = append(titles, "50 ms delay, 1000 connections|(% of the limit workers ÷ 0.05 s; × = Peregrine ÷ FPM)")
		panels = append(panels, delay)
	}
	for _, c := range r.framework {
		var fw []bar
		app := strings.Fields(c.app)[0]
		for j, s := range c.systems {
			ratio := ""
			if j > 0 {
				ratio = fmt.Sprintf("%.1f×", c.ratio(0, j))
			}
			label := "Peregrine|" + app
			if s == sysFPM {
				label = "nginx +|PHP-FPM"
			} else if s == sysPreload {
				label = "PHP-FPM|+ preload"
			}
			fw = append(fw, bar{label, c.medianRPS(j), kilo(c.medianRPS(j)), ratio, systemColor(s)})
		}
		titles = append(titles, fmt.Sprintf("%s hello, %d workers|(× = Peregrine ÷ this)", c.app, c.workers))
		panels = append(panels, fw)
	}
	for _, c := range r.classic {
		var bars []bar
		for j, s := range c.systems {
			ratio := ""
			if j > 0 {
				ratio = fmt.Sprintf("%.2f×", c.ratio(0, j))
			}
			label := map[string]string{sysClassic: "Peregrine|classic", sysFPM: "nginx +|PHP-FPM", sysNative: "Peregrine|native", sysCLI: "Peregrine|cli"}[s]
			bars = append(bars, bar{label, c.medianRPS(j), kilo(c.medianRPS(j)), ratio, systemColor(s)})
		}
		titles = append(titles, fmt.Sprintf("%s, %d workers|(× = first ÷ this)", c.app, c.workers))
		panels = append(panels, bars)
	}
	for _, c := range r.front {
		var bars []bar
		for j, s := range c.systems {
			ratio := ""
			if j > 0 {
				ratio = fmt.Sprintf("%.2f×", c.ratio(0, j))
			}
			label := map[string]string{sysRaw: "Peregrine", sysPeregr: "Peregrine", sysFPM: "nginx +|PHP-FPM", sysNginx: "nginx"}[s]
			bars = append(bars, bar{label, c.medianRPS(j), kilo(c.medianRPS(j)), ratio, systemColor(s)})
		}
		titles = append(titles, fmt.Sprintf("%s|(× = Peregrine ÷ this)", c.app))
		panels = append(panels, bars)
	}
	return titles, panels
}

// chart draws req/s per scenario with gnuplot into png.
func (r *report) chart(ctx context.Context, tmp, png string) error {
	titles, panels := r.panels()
	if len(panels) == 0 {
		return nil
	}
	// pngcairo where the gnuplot build has it, else libgd's png.
	term := "png size %d,%d font 'DejaVu Sans,10'"
	if exec.CommandContext(ctx, "gnuplot", "-e", "set terminal pngcairo").Run() == nil {
		term = "pngcairo size %d,%d font 'DejaVu Sans,10'"
	}
	abs, err := filepath.Abs(png)
	if err != nil {
		return err
	}
	var g strings.Builder
	cols := min(len(panels), 2)
	rows := (len(panels) + cols - 1) / cols
	fmt.Fprintf(&g, "set terminal "+term+"\nset output %q\n", 700*cols, 520*rows+40, abs)
	g.WriteString(`nl(s) = (i = strstrt(s, "|"), i > 0 ? s[1:i-1] . "\n" . s[i+1:] : s)
set style fill solid 0.9 border -1
set boxwidth 0.7
set grid ytics lc rgb '#dddddd'
set ylabel 'requests per second (median)'
set format y '%.0s%c'
set yrange [0:*]
set offsets 0.5, 0.5, graph 0.22, 0
set xtics scale 0 font ',9'
set bmargin 4
set tmargin 5
unset key
`)
	mode := ""
	if r.quick {
		mode = ", quick mode"
	}
	fmt.Fprintf(&g, "set multiplot layout %d,%d title %q font ',12'\n", rows, cols,
		fmt.Sprintf("Peregrine benchmarks: req/s, %d cores (%s)%s, %s", r.machine.cores, r.machine.cpu, mode, r.started.UTC().Format("2006-01-02")))
	for i, bars := range panels {
		fmt.Fprintf(&g, "$d%d << EOD\n", i)
		for k, b := range bars {
			fmt.Fprintf(&g, "%d %q %f %q %q %d\n", k, b.label, b.value, b.top, b.ratio, b.color)
		}
		g.WriteString("EOD\n")
		fmt.Fprintf(&g, "set title nl(%q)\n", titles[i])
		fmt.Fprintf(&g, "plot $d%d using 1:3:6:xtic(nl(strcol(2))) with boxes lc rgb variable, "+
			"'' using 1:3:4 with labels offset 0,0.8 font ',9', "+
			"'' using 1:3:5 with labels offset 0,1.9 font ',10' textcolor rgb '#1f5fa8'\n", i)
	}
	g.WriteString("unset multiplot\n")
	script := filepath.Join(tmp, "chart.gp")
	if err := os.WriteFile(script, []byte(g.String()), 0o644); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "gnuplot", script).CombinedOutput()
	if err != nil {
		return fmt.Errorf("gnuplot %s: %w\n%s", script, err, out)
	}
	return nil
}
