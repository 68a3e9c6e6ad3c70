package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// The jobs tests (docs/jobs.md) push jobs from HTTP workers (testdata/workers/job-push.php) and
// run them on consumers (job-consumer.php), which write a line per job they begin and finish to
// a log file shared by every server of a test. They run against the real Redis and NATS on
// 127.0.0.1, started if absent (skipped only when not installed), each test on streams of its
// own, deleted afterwards.

// ensureBroker makes sure something listens on addr, starting it with argv if not.
func ensureBroker(t *testing.T, addr string, argv ...string) {
	t.Helper()
	up := func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}
	if up() {
		return
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Skipf("nothing listens on %s and %s is not installed", addr, argv[0])
	}
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("start %v: %v\n%s", argv, err, out)
	}
	eventually(t, 15*time.Second, addr+" to come up", up)
}

func ensureRedis(t *testing.T) {
	ensureBroker(t, "127.0.0.1:6379", "redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1",
		"--port", "6379", "--save", "", "--appendonly", "no")
}

func ensureNATS(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/nats-server"); err != nil {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:4222", time.Second); err == nil {
			_ = c.Close()
			return
		}
		t.Skip("nothing listens on 127.0.0.1:4222 and /usr/sbin/nats-server is not installed")
	}
	ensureBroker(t, "127.0.0.1:4222", "start-stop-daemon", "--start", "--oknodo", "--background", "--exec",
		"/usr/sbin/nats-server", "--", "-a", "127.0.0.1", "-p", "4222", "-js", "-sd", "/var/lib/nats-server")
}

// pipelineYAML returns the jobs.pipelines entry "q" for driver, on a stream of the test's own
// (removed with the test), with retries, backoff and timeout.
func pipelineYAML(t *testing.T, driver string, retries int, backoff, timeout string) string {
	t.Helper()
	tag := randomTag()
	switch driver {
	case "redis":
		ensureRedis(t)
		stream := "peregrine-it:" + tag
		t.Cleanup(func() {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
			defer rdb.Close()
			rdb.Del(context.Background(), stream, stream+":delayed", stream+":dead")
		})
		return fmt.Sprintf("    q: { driver: redis, redis: { stream: %q }, retries: %d, backoff: %s, timeout: %s }\n", stream, retries, backoff, timeout)
	case "nats":
		ensureNATS(t)
		stream := "PEREGRINE_IT_" + strings.ToUpper(tag)
		t.Cleanup(func() {
			nc, err := nats.Connect("nats://127.0.0.1:4222")
			if err != nil {
				return
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			for _, s := range []string{stream, stream + "_DELAYED", stream + "_DEAD"} {
				_ = js.DeleteStream(context.Background(), s)
			}
		})
		return fmt.Sprintf("    q: { driver: nats, nats: { stream: %s }, retries: %d, backoff: %s, timeout: %s }\n", stream, retries, backoff, timeout)
	}
	return fmt.Sprintf("    q: { driver: memory, retries: %d, backoff: %s, timeout: %s }\n", retries, backoff, timeout)
}

// jobsServer starts a server with job-push.php as its HTTP worker and consumers of pipeline q
// that log to logFile. runtime is native or cli; adminAddr may be empty.
func jobsServer(t *testing.T, runtime, pipeline, logFile string, consumers int, adminAddr string) *server {
	t.Helper()
	yaml := fmt.Sprintf(`workers:
  runtime: %s
  command: php %s
  count: 2
  stop_timeout: 5s
jobs:
  pipelines:
%s  consumers:
    command: php %s
    count: %d
    env: { JOB_LOG: %q }
kv:
  stores:
    default: { driver: memory }
`, runtime, fixture(t, "job-push.php"), pipeline, fixture(t, "job-consumer.php"), consumers, logFile)
	if adminAddr != "" {
		yaml += "admin:\n  address: " + adminAddr + "\n"
	}
	return startServer(t, yaml)
}

// jobLog is what the consumers of a test wrote.
type jobLog struct {
	path string
}

func newJobLog(t *testing.T) jobLog {
	return jobLog{path: filepath.Join(t.TempDir(), "jobs.log")}
}

// entry is one line of the log: start or done, with the job's id, attempt and consumer pid.
type entry struct {
	event, id, rest string
	attempt, pid    int
}

func (l jobLog) entries(t *testing.T) []entry {
	t.Helper()
	b, err := os.ReadFile(l.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []entry
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, " ", 5)
		if len(f) < 4 {
			continue
		}
		e := entry{event: f[0], id: f[1]}
		e.attempt, _ = strconv.Atoi(f[2])
		e.pid, _ = strconv.Atoi(f[3])
		if len(f) == 5 {
			e.rest = f[4]
		}
		out = append(out, e)
	}
	return out
}

// done returns how many times each job finished.
func (l jobLog) done(t *testing.T) map[string]int {
	n := map[string]int{}
	for _, e := range l.entries(t) {
		if e.event == "done" {
			n[e.id]++
		}
	}
	return n
}

// push pushes n jobs with payload through s's HTTP worker and returns their ids.
func push(t *testing.T, s *server, n int, payload string, query string) []string {
	t.Helper()
	r := do(t, "POST", s.URL+"/push?pipeline=q&n="+strconv.Itoa(n)+query, strings.NewReader(payload))
	if r.Status != 200 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	return strings.Split(string(r.Body), "\n")
}

// TestJobsPushedFromHTTPRunOnConsumers: jobs pushed from an HTTP worker run once each on the
// consumers, with their payload and headers, on every driver (and both runtimes).
func TestJobsPushedFromHTTPRunOnConsumers(t *testing.T) {
	for _, tc := range []struct{ driver, runtime string }{{"memory", "native"}, {"redis", "cli"}, {"nats", "native"}} {
		t.Run(tc.driver, func(t *testing.T) {
			log := newJobLog(t)
			s := jobsServer(t, tc.runtime, pipelineYAML(t, tc.driver, 1, "100ms", "10s"), log.path, 2, "")
			ids := push(t, s, 50, `{"do":"ok","n":[1,2]}`, "")
			eventually(t, 30*time.Second, "50 jobs done", func() bool { return len(log.done(t)) == 50 })
			done := log.done(t)
			for _, id := range ids {
				if done[id] != 1 {
					t.Errorf("job %s done %d times", id, done[id])
				}
			}
			for _, e := range log.entries(t) {
				if e.event == "done" && e.rest != `["q",{"do":"ok","n":[1,2]},{"from":"http"}]` {
					t.Errorf("the consumer saw %s", e.rest)
					break
				}
			}
			// Refusals are clear: an unknown pipeline, a payload over 1 MiB.
			r := do(t, "POST", s.URL+"/push?pipeline=nope", strings.NewReader(`1`))
			if r.Status != 400 || !strings.Contains(string(r.Body), `no such pipeline: "nope"`) {
				t.Errorf("push to an unknown pipeline: %d %s", r.Status, r.Body)
			}
			big := `"` + strings.Repeat("x", 1<<20) + `"`
			r = do(t, "POST", s.URL+"/push?pipeline=q", strings.NewReader(big))
			if r.Status != 400 || !strings.Contains(string(r.Body), "payload or headers too large: 1048578 bytes of payload") {
				t.Errorf("oversized push: %d %.200s", r.Status, r.Body)
			}
		})
	}
}

// TestJobThatThrowsIsRetriedThenDeadLettered: attempts 1..retries+1, each after its backoff;
// then the job is dead, peregrine jobs says so, and peregrine jobs retry runs it again.
func TestJobThatThrowsIsRetriedThenDeadLettered(t *testing.T) {
	for _, driver := range []string{"memory", "redis", "nats"} {
		t.Run(driver, func(t *testing.T) {
			log := newJobLog(t)
			admin := freeAddr(t)
			s := jobsServer(t, "cli", pipelineYAML(t, driver, 2, "300ms", "10s"), log.path, 2, admin)
			id := push(t, s, 1, `{"do":"throw"}`, "")[0]
			eventually(t, 30*time.Second, "three attempts", func() bool {
				n := 0
				for _, e := range log.entries(t) {
					if e.event == "start" && e.id == id {
						n++
					}
				}
				return n == 3
			})
			cfg := writeAdminConfig(t, admin)
			eventually(t, 30*time.Second, "a dead letter in peregrine jobs", func() bool {
				out, _ := exec.Command(binary, "jobs", "-c", cfg, "--json").Output()
				return strings.Contains(string(out), `"dead": 1`) && strings.Contains(string(out), `"failed": 3`)
			})
			for i, e := range log.entries(t) {
				if e.event == "done" {
					t.Errorf("a failing job was done: line %d", i)
				}
			}
			out, err := exec.Command(binary, "jobs", "-c", cfg).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "DEAD") {
				t.Errorf("peregrine jobs: %v\n%s", err, out)
			}
			out, err = exec.Command(binary, "jobs", "retry", "q", "-c", cfg).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "1 dead letters of q back in the queue") {
				t.Fatalf("peregrine jobs retry: %v\n%s", err, out)
			}
			eventually(t, 30*time.Second, "the revived job's first attempt", func() bool {
				for _, e := range log.entries(t) {
					if e.event == "start" && e.id == id && e.attempt == 1 && len(log.entries(t)) > 3 {
						return true
					}
				}
				return false
			})
		})
	}
}

// TestJobBackoffAndDelay: a retry waits at least its backoff and a delayed job its delay, on the
// consumers' clock (the log's order and the time between lines).
func TestJobBackoffAndDelay(t *testing.T) {
	log := newJobLog(t)
	s := jobsServer(t, "cli", pipelineYAML(t, "memory", 1, "700ms", "10s"), log.path, 1, "")
	start := time.Now()
	id := push(t, s, 1, `{"do":"ok"}`, "&delay=0.8")[0]
	eventually(t, 30*time.Second, "the delayed job", func() bool { return log.done(t)[id] == 1 })
	if took := time.Since(start); took < 800*time.Millisecond {
		t.Errorf("a job delayed 0.8s ran within %v", took)
	}
	start = time.Now()
	id = push(t, s, 1, `{"do":"throw"}`, "")[0]
	eventually(t, 30*time.Second, "the retry", func() bool {
		n := 0
		for _, e := range log.entries(t) {
			if e.id == id && e.event == "start" {
				n++
			}
		}
		return n == 2
	})
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Errorf("a retry with a 700ms backoff came within %v", took)
	}
}

// TestJobThatKillsItsWorkerIsRetriedOnAnother: a consumer killed mid-job fails the attempt; the
// retry runs on another (the replacement) process; a job that always kills its consumer is
// dead-lettered after its attempts.
func TestJobThatKillsItsWorkerIsRetriedOnAnother(t *testing.T) {
	for _, driver := range []string{"memory", "redis"} {
		t.Run(driver, func(t *testing.T) {
			log := newJobLog(t)
			admin := freeAddr(t)
			s := jobsServer(t, "cli", pipelineYAML(t, driver, 2, "100ms", "10s"), log.path, 2, admin)
			once := push(t, s, 1, `{"do":"die-once"}`, "")[0]
			always := push(t, s, 1, `{"do":"die"}`, "")[0]
			eventually(t, 30*time.Second, "the retried job done", func() bool { return log.done(t)[once] == 1 })
			var pids []int
			for _, e := range log.entries(t) {
				if e.id == once && e.event == "start" {
					pids = append(pids, e.pid)
				}
			}
			if len(pids) != 2 || pids[0] == pids[1] {
				t.Errorf("the job that killed its consumer ran on %v; want two different processes", pids)
			}
			cfg := writeAdminConfig(t, admin)
			eventually(t, 30*time.Second, "the job that always kills its consumer dead", func() bool {
				out, _ := exec.Command(binary, "jobs", "-c", cfg, "--json").Output()
				return strings.Contains(string(out), `"dead": 1`)
			})
			n := 0
			for _, e := range log.entries(t) {
				if e.id == always && e.event == "start" {
					n++
				}
			}
			if n != 3 {
				t.Errorf("the job that always kills its consumer began %d times, want 3", n)
			}
			if s.log.count(`status 502`) == 0 {
				t.Errorf("the log does not say the consumer crashed (502)")
			}
		})
	}
}

// TestTwoServersOneBroker: two servers on the same Redis (and the same NATS), jobs pushed to
// both: every job done exactly once when nothing fails.
func TestTwoServersOneBroker(t *testing.T) {
	for _, driver := range []string{"redis", "nats"} {
		t.Run(driver, func(t *testing.T) {
			log := newJobLog(t)
			p := pipelineYAML(t, driver, 1, "100ms", "10s")
			a := jobsServer(t, "cli", p, log.path, 2, "")
			b := jobsServer(t, "cli", p, log.path, 2, "")
			var ids []string
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, s := range []*server{a, b} {
				for range 4 {
					wg.Go(func() {
						got := push(t, s, 50, `{"do":"ok"}`, "")
						mu.Lock()
						ids = append(ids, got...)
						mu.Unlock()
					})
				}
			}
			wg.Wait()
			eventually(t, 60*time.Second, "400 jobs done", func() bool { return len(log.done(t)) == 400 })
			time.Sleep(500 * time.Millisecond) // a duplicate would show now
			done := log.done(t)
			byServer := map[int]int{}
			for _, e := range log.entries(t) {
				if e.event == "done" {
					byServer[e.pid]++
				}
			}
			for _, id := range ids {
				if done[id] != 1 {
					t.Errorf("job %s done %d times", id, done[id])
				}
			}
			t.Logf("400 jobs done by %d consumer processes: %v", len(byServer), byServer)
		})
	}
}

// TestKill9ServerWhileJobsRun: two servers on one broker; one is killed with SIGKILL while its
// consumers run jobs; the other finishes every job, after the timeout. At least once: a job the
// dead server had finished but not acknowledged runs twice; the test reports how many.
func TestKill9ServerWhileJobsRun(t *testing.T) {
	for _, driver := range []string{"redis", "nats"} {
		t.Run(driver, func(t *testing.T) {
			log := newJobLog(t)
			p := pipelineYAML(t, driver, 3, "100ms", "2s")
			a := jobsServer(t, "cli", p, log.path, 2, "")
			ids := push(t, a, 40, `{"do":"sleep","ms":150}`, "")
			// B starts once A's consumers are at work, so A holds jobs when it dies.
			eventually(t, 30*time.Second, "A's consumers at work", func() bool { return len(log.entries(t)) >= 4 })
			b := jobsServer(t, "cli", p, log.path, 2, "")
			_ = b
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			a.wait(t, 10*time.Second)
			eventually(t, 60*time.Second, "every job done", func() bool {
				d := log.done(t)
				for _, id := range ids {
					if d[id] == 0 {
						return false
					}
				}
				return true
			})
			d := log.done(t)
			dups, reclaimed := 0, 0
			for _, id := range ids {
				if d[id] > 1 {
					dups++
				}
			}
			for _, e := range log.entries(t) {
				if e.event == "start" && e.attempt > 1 {
					reclaimed++
				}
			}
			if reclaimed == 0 {
				t.Errorf("no job was taken over from the killed server")
			}
			t.Logf("40 jobs: %d taken over from the killed server, %d done twice (at least once)", reclaimed, dups)
		})
	}
}

// TestKVFromWorkers: the memory store through Peregrine\KV from HTTP workers.
func TestKVFromWorkers(t *testing.T) {
	log := newJobLog(t)
	s := jobsServer(t, "native", pipelineYAML(t, "memory", 0, "1s", "10s"), log.path, 1, "")
	kv := func(q string) string {
		r := get(t, s.URL+"/kv?"+q)
		return fmt.Sprintf("%d %s", r.Status, r.Body)
	}
	for _, c := range [][2]string{
		{"op=get&key=a", `200 "missing"`},
		{"op=set&key=a&value=" + `{"x":[1,2]}`, "200 null"},
		{"op=get&key=a", `200 {"x":[1,2]}`},
		{"op=has&key=a", "200 true"},
		{"op=delete&key=a", "200 null"},
		{"op=has&key=a", "200 false"},
		{"op=incr&key=n", "200 1"},
		{"op=incr&key=n&by=41", "200 42"},
		{"store=nope&op=get&key=a", `400 RuntimeException: kv.get: no such store "nope" (kv.stores)`},
	} {
		if got := kv(c[0]); got != c[1] {
			t.Errorf("%s: %s, want %s", c[0], got, c[1])
		}
	}
	if _, err := os.Stat("/usr/share/php/Psr/SimpleCache/autoload.php"); err == nil {
		want := `[true,{"a":1},true,true,"gone",true,{"x":1,"y":2,"z":null},true,false,"invalid"]`
		if r := get(t, s.URL+"/psr16"); r.Status != 200 || string(r.Body) != want {
			t.Errorf("PSR-16 round: %d %s, want %s", r.Status, r.Body, want)
		}
	} else {
		t.Log("php-psr-simple-cache is not installed: the PSR-16 adapter is not tested")
	}
	// Many workers incrementing at once lose nothing.
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { kv("op=incr&key=c") })
	}
	wg.Wait()
	if got := kv("op=get&key=c"); got != "200 50" {
		t.Errorf("after 50 concurrent incr: %s", got)
	}
}

// writeAdminConfig writes a config that only names the admin listener, for peregrine jobs.
func writeAdminConfig(t *testing.T, addr string) string {
	p := filepath.Join(t.TempDir(), "admin.yaml")
	if err := os.WriteFile(p, []byte("admin:\n  address: "+addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestJobsThroughput measures, for each driver, 1 KiB payloads pushed from HTTP requests (8
// workers, 16 clients) and consumed by 2 consumers (testdata/workers/job-bench.php, which does nothing): the rate of
// the whole path (pushing while consuming), the rate at which 2 consumers drain a full queue,
// and the latency a push adds to a request (p50, p99, over a request without one). It asserts
// nothing about speed; it runs with PEREGRINE_BENCH_JOBS=1 (or the number of jobs), best with
// -tags stress, which builds the binary without the race detector.
func TestJobsThroughput(t *testing.T) {
	if os.Getenv("PEREGRINE_BENCH_JOBS") == "" {
		t.Skip("a benchmark: set PEREGRINE_BENCH_JOBS=1")
	}
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("PEREGRINE_BENCH_JOBS")); err == nil && v > 1 {
		n = v
	}
	for _, driver := range []string{"memory", "redis", "nats"} {
		t.Run(driver, func(t *testing.T) {
			adminAddr := freeAddr(t)
			s := startServer(t, fmt.Sprintf(`workers:
  runtime: native
  command: php %s
  count: 8
jobs:
  pipelines:
%s  consumers:
    command: php %s
    count: 2
admin:
  address: %s
`, fixture(t, "job-push.php"), pipelineYAML(t, driver, 0, "1s", "30s"), fixture(t, "job-bench.php"), adminAddr))
			cfg := writeAdminConfig(t, adminAddr)
			payload := `{"p":"` + strings.Repeat("x", 1016) + `"}` // 1 KiB of JSON
			done := func() int64 {
				r := get(t, "http://"+adminAddr+"/jobs")
				var list []struct{ Done int64 }
				if err := json.Unmarshal(r.Body, &list); err != nil || len(list) != 1 {
					t.Fatalf("GET /jobs: %v %s", err, r.Body)
				}
				return list[0].Done
			}
			waitDone := func(what string, want int64) {
				deadline := time.Now().Add(5 * time.Minute)
				for done() < want {
					if time.Now().After(deadline) {
						t.Fatalf("timed out waiting for %s: %d of %d done", what, done(), want)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			// send makes count requests from clients clients and returns their latencies.
			send := func(path string, count, clients int) []time.Duration {
				lat := make([]time.Duration, count)
				var next atomic.Int64
				var wg sync.WaitGroup
				for range clients {
					wg.Go(func() {
						for i := int(next.Add(1)) - 1; i < count; i = int(next.Add(1)) - 1 {
							start := time.Now()
							r, err := doErr(context.Background(), "POST", s.URL+path, strings.NewReader(payload))
							lat[i] = time.Since(start)
							if err != nil || r.Status != 200 {
								t.Errorf("%s: %v %d %s", path, err, r.Status, r.Body)
								return
							}
						}
					})
				}
				wg.Wait()
				slices.Sort(lat)
				return lat
			}
			pct := func(l []time.Duration, p float64) time.Duration { return l[int(float64(len(l)-1)*p)] }

			// Latency, one client at a time: a request with a push against one without.
			lat := min(n/4, 2000)
			base := send("/noop", lat, 1)
			pushed := send("/push?pipeline=q", lat, 1)
			waitDone("the latency round", int64(lat))

			// Throughput: 16 clients push while the consumers run them; the same without a push.
			start := time.Now()
			send("/noop", n, 16)
			noop := time.Since(start)
			start = time.Now()
			send("/push?pipeline=q", n, 16)
			pushTime := time.Since(start)
			waitDone("every job", int64(lat+n))
			whole := time.Since(start)

			// The drain: a full queue, then the consumers alone.
			if out, err := exec.Command(binary, "jobs", "pause", "q", "-c", cfg).CombinedOutput(); err != nil {
				t.Fatalf("pause: %v %s", err, out)
			}
			send("/push?pipeline=q", n, 16)
			before := done()
			start = time.Now()
			if out, err := exec.Command(binary, "jobs", "resume", "q", "-c", cfg).CombinedOutput(); err != nil {
				t.Fatalf("resume: %v %s", err, out)
			}
			waitDone("the drain", before+int64(n))
			drain := time.Since(start)

			t.Logf("%s: %d jobs of 1 KiB: pushed from HTTP at %.0f/s (requests without a push: %.0f/s), pushed and done at %.0f jobs/s; 2 consumers drain %.0f jobs/s; "+
				"push adds p50 %v, p99 %v to a request (p50 %v, p99 %v without)",
				driver, n, float64(n)/pushTime.Seconds(), float64(n)/noop.Seconds(), float64(n)/whole.Seconds(), float64(n)/drain.Seconds(),
				pct(pushed, 0.5)-pct(base, 0.5), pct(pushed, 0.99)-pct(base, 0.99),
				pct(base, 0.5), pct(base, 0.99))
		})
	}
}

// brokerProcess is a Redis or NATS server of a test's own, on a free port, keeping its data in
// a directory of the test, so that it can be killed and started again.
type brokerProcess struct {
	argv []string
	cmd  *exec.Cmd
	addr string
}

func startBrokerProcess(t *testing.T, addr string, argv ...string) *brokerProcess {
	t.Helper()
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Skipf("%s is not installed", argv[0])
	}
	b := &brokerProcess{argv: argv, addr: addr}
	b.start(t)
	t.Cleanup(func() { b.kill() })
	return b
}

func (b *brokerProcess) start(t *testing.T) {
	t.Helper()
	b.cmd = exec.Command(b.argv[0], b.argv[1:]...)
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, b.argv[0]+" to listen on "+b.addr, func() bool {
		c, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}

func (b *brokerProcess) kill() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Kill()
		_ = b.cmd.Wait()
	}
}

// TestBrokerRestartLosesNoPushedJob: jobs are pushed from HTTP requests while the broker is
// killed (SIGKILL) and started again; every push that was acknowledged to PHP (its request got
// 200 and an id) is done once the broker is back. Redis runs with appendfsync always, NATS
// with its file store, each a server of the test's own.
func TestBrokerRestartLosesNoPushedJob(t *testing.T) {
	for _, driver := range []string{"redis", "nats"} {
		t.Run(driver, func(t *testing.T) {
			addr := freeAddr(t)
			host, port, _ := net.SplitHostPort(addr)
			dir := t.TempDir()
			var broker *brokerProcess
			var pipeline string
			if driver == "redis" {
				broker = startBrokerProcess(t, addr, "redis-server", "--bind", host, "--port", port, "--dir", dir,
					"--save", "", "--appendonly", "yes", "--appendfsync", "always")
				pipeline = fmt.Sprintf("    q: { driver: redis, redis: { address: %q }, timeout: 5s }\n", addr)
			} else {
				broker = startBrokerProcess(t, addr, "/usr/sbin/nats-server", "-a", host, "-p", port, "-js", "-sd", dir)
				pipeline = fmt.Sprintf("    q: { driver: nats, nats: { url: \"nats://%s\" }, timeout: 5s }\n", addr)
			}
			log := newJobLog(t)
			s := jobsServer(t, "cli", pipeline, log.path, 2, "")

			var mu sync.Mutex
			var acked []string
			refused := 0
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						r, err := doErr(context.Background(), "POST", s.URL+"/push?pipeline=q", strings.NewReader(`{"do":"ok"}`))
						mu.Lock()
						if err == nil && r.Status == 200 {
							acked = append(acked, string(r.Body))
						} else {
							refused++
						}
						mu.Unlock()
					}
				})
			}
			count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
			eventually(t, 30*time.Second, "100 pushes", func() bool { return count() >= 100 })
			broker.kill()
			time.Sleep(500 * time.Millisecond) // pushes fail meanwhile
			broker.start(t)
			before := count()
			eventually(t, 60*time.Second, "pushes acknowledged again", func() bool { return count() >= before+100 })
			close(stop)
			wg.Wait()
			eventually(t, 90*time.Second, "every acknowledged push done", func() bool {
				d := log.done(t)
				for _, id := range acked {
					if d[id] == 0 {
						return false
					}
				}
				return true
			})
			d := log.done(t)
			dups := 0
			for _, id := range acked {
				if d[id] > 1 {
					dups++
				}
			}
			t.Logf("%s restarted under load: %d pushes acknowledged, all done (%d twice), %d refused while it was down",
				driver, len(acked), dups, refused)
		})
	}
}

// TestSIGHUPReplacesConsumers: a reset (SIGHUP, or peregrine reset) replaces the consumers as
// it does the workers, so that jobs run the new code.
func TestSIGHUPReplacesConsumers(t *testing.T) {
	for _, how := range []string{"SIGHUP", "peregrine reset"} {
		t.Run(how, func(t *testing.T) { testResetReplacesConsumers(t, how) })
	}
}

func testResetReplacesConsumers(t *testing.T, how string) {
	log := newJobLog(t)
	admin := freeAddr(t)
	s := jobsServer(t, "cli", pipelineYAML(t, "memory", 0, "1s", "10s"), log.path, 1, admin)
	first := push(t, s, 1, `{"do":"ok"}`, "")[0]
	eventually(t, 30*time.Second, "the first job", func() bool { return log.done(t)[first] == 1 })
	if how == "SIGHUP" {
		s.signal(syscall.SIGHUP)
		s.log.waitFor(t, "all workers replaced", 60*time.Second)
	} else if out, err := exec.Command(binary, "reset", "-c", writeAdminConfig(t, admin)).CombinedOutput(); err != nil {
		t.Fatalf("peregrine reset: %v\n%s", err, out)
	}
	second := push(t, s, 1, `{"do":"ok"}`, "")[0]
	eventually(t, 30*time.Second, "the second job", func() bool { return log.done(t)[second] == 1 })
	pids := map[string]int{}
	for _, e := range log.entries(t) {
		if e.event == "done" {
			pids[e.id] = e.pid
		}
	}
	if pids[first] == pids[second] {
		t.Errorf("the same consumer (pid %d) ran jobs before and after SIGHUP", pids[first])
	}
}

// TestLaravelQueueConnection: under serve --laravel, dispatch() on the peregrine connection
// pushes to a pipeline whose consumers (php/bin/laravel-consumer.php, started by --laravel)
// run the job through Laravel's queue worker: a job runs once; one that throws is retried
// after its $backoff until its $tries, then failed() runs; release() and delay() wait.
func TestLaravelQueueConnection(t *testing.T) {
	requireLaravel(t)
	dir := t.TempDir()
	copyTree(t, filepath.Join(repoRoot(t), "examples", "laravel"), dir)
	copyTree(t, filepath.Join(repoRoot(t), "testdata", "jobs-laravel"), dir)
	appConfig := filepath.Join(dir, "config", "app.php")
	b, err := os.ReadFile(appConfig)
	if err != nil {
		t.Fatal(err)
	}
	patched := strings.Replace(string(b), "App\\Providers\\RouteServiceProvider::class,",
		"App\\Providers\\RouteServiceProvider::class,\n        Peregrine\\Laravel\\QueueServiceProvider::class,\n        App\\Providers\\JobsTestProvider::class,", 1)
	if patched == string(b) {
		t.Fatal("config/app.php of examples/laravel no longer lists App\\Providers\\RouteServiceProvider")
	}
	if err := os.WriteFile(appConfig, []byte(patched), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(t.TempDir(), "jobs.log")
	s := launch(t, fmt.Sprintf(`workers:
  runtime: native
  count: 1
  env: { JOB_LOG: %q }
jobs:
  pipelines:
    q: { retries: 5, backoff: 100ms, timeout: 10s }
  consumers:
    count: 1
`, logFile), "--laravel", dir)
	select {
	case <-s.done:
		t.Fatalf("peregrine exited at start (%v); log:\n%s", s.err, s.log.String())
	default:
	}
	lines := func() []string {
		b, _ := os.ReadFile(logFile)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	has := func(prefix string) int {
		n := 0
		for _, l := range lines() {
			if strings.HasPrefix(l, prefix) {
				n++
			}
		}
		return n
	}
	for _, q := range []string{"mode=ok", "mode=throw", "mode=release", "mode=delayed&delay=1"} {
		if r := get(t, s.URL+"/dispatch?"+q); r.Status != 200 || string(r.Body) != "dispatched" {
			t.Fatalf("dispatch %s: %d %s", q, r.Status, r.Body)
		}
	}
	eventually(t, 30*time.Second, "every job settled", func() bool {
		return has("ok 1 ") == 1 && has("failed throw") == 1 && has("release 2 ") == 1 && has("delayed 1 ") == 1
	})
	if n := has("throw "); n != 3 {
		t.Errorf("a job with $tries = 3 that always throws ran %d times; log:\n%s", n, strings.Join(lines(), "\n"))
	}
	if n := has("ok "); n != 1 {
		t.Errorf("a job that succeeds ran %d times", n)
	}
	t.Logf("the jobs' runs:\n%s", strings.Join(lines(), "\n"))
}

// TestConsumerMaxJobs: consumers are recycled after jobs.consumers.max_jobs jobs, as workers
// are after workers.max_jobs, and no job is lost to it.
func TestConsumerMaxJobs(t *testing.T) {
	log := newJobLog(t)
	s := startServer(t, fmt.Sprintf(`workers:
  runtime: cli
  command: php %s
  count: 1
jobs:
  pipelines:
%s  consumers:
    command: php %s
    count: 1
    max_jobs: 2
    env: { JOB_LOG: %q }
`, fixture(t, "job-push.php"), pipelineYAML(t, "memory", 0, "1s", "10s"), fixture(t, "job-consumer.php"), log.path))
	ids := push(t, s, 6, `{"do":"ok"}`, "")
	eventually(t, 30*time.Second, "6 jobs done", func() bool { return len(log.done(t)) == 6 })
	perPID := map[int]int{}
	for _, e := range log.entries(t) {
		if e.event == "done" {
			perPID[e.pid]++
		}
	}
	for pid, n := range perPID {
		if n > 2 {
			t.Errorf("consumer %d ran %d jobs with max_jobs 2", pid, n)
		}
	}
	if d := log.done(t); len(d) != len(ids) {
		t.Errorf("%d of %d jobs done", len(d), len(ids))
	}
}

// TestConsumersBesideConcurrentWorkers: HTTP workers with workers.concurrency > 1 push jobs
// that consumers, which run one job at a time, take as usual.
func TestConsumersBesideConcurrentWorkers(t *testing.T) {
	log := newJobLog(t)
	s := startServer(t, fmt.Sprintf(`workers:
  runtime: cli
  command: php %s
  count: 1
  concurrency: 4
jobs:
  pipelines:
%s  consumers:
    command: php %s
    count: 1
    env: { JOB_LOG: %q }
`, fixture(t, "job-push.php"), pipelineYAML(t, "memory", 0, "1s", "10s"), fixture(t, "job-consumer.php"), log.path))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { push(t, s, 5, `{"do":"ok"}`, "") })
	}
	wg.Wait()
	eventually(t, 30*time.Second, "20 jobs done", func() bool { return len(log.done(t)) == 20 })
}
