package main

// The jobs scenario (issue 19): 1 KiB payloads pushed from HTTP requests (examples/jobs/push.php,
// Peregrine\Jobs::push in the handler) and consumed by 2 consumers (examples/jobs/consumer.php,
// which does nothing with them), for the memory, redis and nats drivers. Per driver:
//   - the push's added latency: the same request with and without the push (GET /push against
//     GET /noop), one connection (wrk -c1), p50 and p99 of each;
//   - the push rate: wrk -c16 on /push with the pipeline paused (the jobs pile up);
//   - the consume rate: the pipeline resumed, the jobs counted (the admin listener's GET /jobs)
//     until the queue has drained.
// Redis and NATS get a stream of the run's own name, deleted at the end. A broker that does not
// answer gets a row that says so.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

type jobsResult struct {
	rows []*jobsRow
}

type jobsRow struct {
	driver        string
	target        float64 // issue 19's jobs/s
	noop, push    result  // the latency round
	pushLoad      result  // the push rate round
	jobs          int64   // consumed in the drain
	drain         time.Duration
	drainCPU      time.Duration // the server's (daemon, HTTP workers, consumers) during the drain
	drainOther    float64       // cores other processes kept busy during the drain (the brokers included)
	consumers     int
	httpWorkers   int
	skipped       string
	latencyConns  int
	pushLoadConns int
}

func (r *jobsRow) cpuPerJob() time.Duration {
	if r.jobs <= 0 {
		return 0
	}
	return r.drainCPU / time.Duration(r.jobs)
}

func (r *jobsRow) rate() float64 {
	if r.drain <= 0 {
		return 0
	}
	return float64(r.jobs) / r.drain.Seconds()
}

func (l *lab) jobsScenario(p plan) (*jobsResult, error) {
	res := &jobsResult{}
	dur := p.delayDur
	for _, d := range []struct {
		driver string
		target float64
		addr   string
	}{{"memory", 20000, ""}, {"redis", 10000, "127.0.0.1:6379"}, {"nats", 10000, "127.0.0.1:4222"}} {
		row := &jobsRow{driver: d.driver, target: d.target, consumers: 2, httpWorkers: 4, latencyConns: 1, pushLoadConns: 16}
		res.rows = append(res.rows, row)
		if d.addr != "" {
			if missing := tcpMissing(d.driver, d.addr); missing != "" {
				row.skipped = missing
				logf("jobs: %s: skipped (%s)", d.driver, missing)
				continue
			}
		}
		if err := l.jobsDriver(row, d.addr, dur); err != nil {
			if l.ctx.Err() != nil {
				return nil, l.ctx.Err()
			}
			row.skipped = firstLine(err.Error(), "")
			logf("jobs: %s: %v", d.driver, err)
		}
	}
	return res, nil
}

// jobsDriver measures one driver on a server of its own, on a stream of its own.
func (l *lab) jobsDriver(row *jobsRow, addr string, dur time.Duration) error {
	tagBytes := make([]byte, 4)
	_, _ = rand.Read(tagBytes)
	tag := hex.EncodeToString(tagBytes)
	pipeline := "    bench: { driver: memory, retries: 0, timeout: 30s }\n"
	switch row.driver {
	case "redis":
		stream := "peregrine-bench:" + tag
		pipeline = fmt.Sprintf("    bench: { driver: redis, redis: { address: %q, stream: %q }, retries: 0, timeout: 30s }\n", addr, stream)
		defer func() {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := rdb.Del(ctx, stream, stream+":delayed", stream+":dead").Err(); err != nil {
				logf("jobs: deleting the Redis stream %s: %v", stream, err)
			}
		}()
	case "nats":
		stream := "PEREGRINE_BENCH_" + strings.ToUpper(tag)
		pipeline = fmt.Sprintf("    bench: { driver: nats, nats: { url: %q, stream: %s }, retries: 0, timeout: 30s }\n", "nats://"+addr, stream)
		defer func() {
			nc, err := nats.Connect("nats://" + addr)
			if err != nil {
				logf("jobs: deleting the NATS streams %s: %v", stream, err)
				return
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, s := range []string{stream, stream + "_DELAYED", stream + "_DEAD"} {
				if err := js.DeleteStream(ctx, s); err != nil && !strings.Contains(err.Error(), "not found") {
					logf("jobs: deleting the NATS stream %s: %v", s, err)
				}
			}
		}()
	}

	port, err := freePort()
	if err != nil {
		return err
	}
	adminPort, err := freePort()
	if err != nil {
		return err
	}
	id := l.name("peregrine-jobs-" + row.driver)
	conf := fmt.Sprintf(`http:
  address: 127.0.0.1:%d
admin:
  address: 127.0.0.1:%d
workers:
  command: [php, %q]
  dir: %q
  count: %d
  env: { BENCH_PIPELINE: bench }
jobs:
  pipelines:
%s  consumers:
    command: [php, %q]
    count: %d
log:
  level: warn
`, port, adminPort, l.abs("examples/jobs/push.php"), l.root, row.httpWorkers, pipeline, l.abs("examples/jobs/consumer.php"), row.consumers)
	confPath := filepath.Join(l.tmp, id+".yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	daemon, err := l.start("peregrine", id, nil, syscall.SIGTERM, l.peregrine, "serve", "-c", confPath)
	if err != nil {
		return err
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	s := &server{name: "Peregrine jobs, " + row.driver, url: base + "/push", procs: []*proc{daemon}}
	if err := l.ready(s); err != nil {
		return err
	}
	defer l.stopServer(s)
	admin := fmt.Sprintf("http://127.0.0.1:%d/jobs", adminPort)
	status := func() (pushed, done int64, err error) {
		resp, err := l.client(5 * time.Second).Get(admin)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		var list []struct {
			Name   string
			Pushed int64
			Done   int64
			Error  string
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			return 0, 0, fmt.Errorf("GET /jobs: %w", err)
		}
		for _, p := range list {
			if p.Name == "bench" {
				return p.Pushed, p.Done, nil
			}
		}
		return 0, 0, fmt.Errorf("GET /jobs: no pipeline bench")
	}
	// waitDone waits until the consumers have done every job pushed so far.
	waitDone := func(limit time.Duration) (int64, error) {
		deadline := time.Now().Add(limit)
		for {
			pushed, done, err := status()
			if err != nil {
				return 0, err
			}
			if done >= pushed {
				return done, nil
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("%d of %d jobs done after %s", done, pushed, limit)
			}
			if err := l.ctx.Err(); err != nil {
				return 0, err
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	pause := func(verb string) error {
		resp, err := l.client(5*time.Second).Post(admin+"/bench/"+verb, "application/json", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST /jobs/bench/%s: %d", verb, resp.StatusCode)
		}
		return nil
	}

	logf("jobs: %s: latency, wrk -c%d -d%s on /noop then /push", row.driver, row.latencyConns, dur)
	if _, err := runWrk(l.ctx, base+"/push", row.latencyConns, time.Second); err != nil { // warm-up
		return err
	}
	if row.noop, err = runWrk(l.ctx, base+"/noop", row.latencyConns, dur); err != nil {
		return err
	}
	if row.push, err = runWrk(l.ctx, base+"/push", row.latencyConns, dur); err != nil {
		return err
	}
	if _, err := waitDone(5 * time.Minute); err != nil {
		return err
	}

	logf("jobs: %s: pushing with the pipeline paused, wrk -c%d -d%s, then the 2 consumers drain it", row.driver, row.pushLoadConns, dur)
	if err := pause("pause"); err != nil {
		return err
	}
	_, before, err := status()
	if err != nil {
		return err
	}
	if row.pushLoad, err = runWrk(l.ctx, base+"/push", row.pushLoadConns, dur); err != nil {
		return err
	}
	pushed, _, err := status()
	if err != nil {
		return err
	}
	meter := startMeter(s)
	start := time.Now()
	if err := pause("resume"); err != nil {
		return err
	}
	done, err := waitDone(5 * time.Minute)
	if err != nil {
		return err
	}
	row.drain = time.Since(start)
	row.drainCPU, row.drainOther = meter.stop()
	row.jobs = min(done, pushed) - before
	logf("  %s: push %s p50, %s p99; %0.f pushes/s; %d jobs drained in %s: %.0f jobs/s, server CPU/job %s, other load %.2f cores", row.driver,
		fmtDelta(row.push.p50-row.noop.p50), fmtDelta(row.push.p99-row.noop.p99), row.pushLoad.rps, row.jobs,
		row.drain.Round(time.Millisecond), row.rate(), fmtDur(row.cpuPerJob()), row.drainOther)
	return nil
}

func (j *jobsResult) markdown() string {
	if j == nil || len(j.rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Background jobs (issue 19)\n\n")
	r0 := j.rows[0]
	fmt.Fprintf(&b, "examples/jobs: 1 KiB JSON payloads pushed from HTTP requests (`Peregrine\\Jobs::push()` in the handler, %d HTTP workers) "+
		"and consumed by %d consumers that do nothing with them. Latency: the same request with and without the push "+
		"(GET /push against GET /noop, wrk -c%d). Pushes/s: wrk -c%d on /push with the pipeline paused. Jobs/s: the pipeline resumed, "+
		"the jobs counted (GET /jobs on the admin listener) until the queue drained; server CPU per job (daemon, HTTP workers, consumers) and "+
		"the other load (cores other processes kept busy, the broker included) are those of the drain.\n\n", r0.httpWorkers, r0.consumers, r0.latencyConns, r0.pushLoadConns)
	b.WriteString("| driver | jobs/s consumed | of the target | pushes/s (HTTP) | request p50 / p99 without push | with push | push adds p50 / p99 | drain: server CPU / job | drain: other load | failed requests |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range j.rows {
		if r.skipped != "" {
			fmt.Fprintf(&b, "| %s | not measured: %s | | | | | | | | |\n", r.driver, strings.ReplaceAll(r.skipped, "|", "/"))
			continue
		}
		fmt.Fprintf(&b, "| %s | %s (%d jobs in %s) | %.0f%% of %s | %s | %s / %s | %s / %s | %s / %s | %s | %.2f | %d |\n", r.driver,
			fmtRPS(r.rate()), r.jobs, r.drain.Round(time.Millisecond), 100*r.rate()/r.target, fmtRPS(r.target), fmtRPS(r.pushLoad.rps),
			fmtDur(r.noop.p50), fmtDur(r.noop.p99), fmtDur(r.push.p50), fmtDur(r.push.p99),
			fmtDelta(r.push.p50-r.noop.p50), fmtDelta(r.push.p99-r.noop.p99), fmtDur(r.cpuPerJob()), r.drainOther,
			r.noop.failed()+r.push.failed()+r.pushLoad.failed())
	}
	b.WriteString("\n")
	return b.String()
}

// fmtDelta is a latency difference, signed.
func fmtDelta(d time.Duration) string {
	if d < 0 {
		return "−" + fmtDur(-d)
	}
	if d == 0 {
		return "0"
	}
	return "+" + fmtDur(d)
}
