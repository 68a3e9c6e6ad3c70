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
		stream := "peregrine-it-jobs:" + tag
		t.Cleanup(func() {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
			defer rdb.Close()
			rdb.Del(context.Background(), stream, stream+":delayed", stream+":dead", stream+":started")
		})
		return fmt.Sprintf("    q: { driver: redis, redis: { stream: %q }, retries: %d, backoff: %s, timeout: %s }\n", stream, retries, backoff, timeout)
	case "nats":
		ensureNATS(t)
		stream := "PEREGRINE_IT_JOBS_" + strings.ToUpper(tag)
		t.Cleanup(func() {
			nc, err := nats.Connect("nats://127.0.0.1:4222")
			if err != nil {
				return
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			for _, s := range []string{stream, stream + "_DELAYED", stream + "_DEAD", stream + "_STARTED"} {
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

// TestJobThatThrowsIsRetriedThenDeadLettered: a job that throws runs retries + 1 times, then
// lies in the dead letters, which peregrine jobs dead lists and shows (payload, the
// exception's message); revived one by one (jobs retry q ID) and all at once (jobs retry q)
// it runs again as the attempts of a new life, each of them (issue 25, item 17: on
// NATS the retries of a revived job reused its first life's message ids and were dropped as
// duplicates), and dies again; jobs delete q ID removes it.
func TestJobThatThrowsIsRetriedThenDeadLettered(t *testing.T) {
	for _, driver := range []string{"memory", "redis", "nats"} {
		t.Run(driver, func(t *testing.T) {
			log := newJobLog(t)
			admin := freeAddr(t)
			s := jobsServer(t, "cli", pipelineYAML(t, driver, 2, "300ms", "10s"), log.path, 2, admin)
			id := push(t, s, 1, `{"do":"throw"}`, "")[0]
			cfg := writeAdminConfig(t, admin)
			jobs := func(args ...string) string {
				t.Helper()
				out, err := exec.Command(binary, append([]string{"jobs", "-c", cfg}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("peregrine jobs %v: %v\n%s", args, err, out)
				}
				return string(out)
			}
			// lives waits until the job began 3 attempts per life in lives lives, each life's
			// attempts 1, 2, 3 in order, and lies in the dead letters again.
			lives := func(n int) {
				t.Helper()
				eventually(t, 30*time.Second, fmt.Sprintf("%d attempts over %d lives, then a dead letter", 3*n, n), func() bool {
					var attempts []int
					for _, e := range log.entries(t) {
						if e.event == "start" && e.id == id {
							attempts = append(attempts, e.attempt)
						}
					}
					return len(attempts) == 3*n && strings.Contains(jobs("--json"), `"dead": 1`)
				})
				var attempts []int
				for _, e := range log.entries(t) {
					if e.event == "start" && e.id == id {
						attempts = append(attempts, e.attempt)
					}
				}
				for i, a := range attempts {
					if a != i%3+1 {
						t.Fatalf("attempts over %d lives: %v", n, attempts)
					}
				}
			}
			lives(1)
			if st := jobsStatus(t, cfg); st["failed"] != 3.0 || st["running"] != 0.0 {
				t.Errorf("after three failed attempts: %v", st)
			}
			for i, e := range log.entries(t) {
				if e.event == "done" {
					t.Errorf("a failing job was done: line %d", i)
				}
			}
			if out := jobs(); !strings.Contains(out, "DEAD") {
				t.Errorf("peregrine jobs:\n%s", out)
			}
			if out := jobs("dead", "q"); !strings.Contains(out, id) || !strings.Contains(out, "failing on purpose, attempt 3") ||
				!strings.Contains(out, `{"do":"throw"}`) {
				t.Errorf("peregrine jobs dead q:\n%s", out)
			}
			out := jobs("dead", "q", "show", id)
			for _, want := range []string{"id:       " + id, "attempt:  3", `payload:  {"do":"throw"}`, "header:   from: http",
				"RuntimeException", "failing on purpose, attempt 3", "died:"} {
				if !strings.Contains(out, want) {
					t.Errorf("peregrine jobs dead q show ID lacks %q:\n%s", want, out)
				}
			}
			if out := jobs("retry", "q", id); !strings.Contains(out, "dead letter "+id+" of q back in the queue") {
				t.Fatalf("peregrine jobs retry q ID:\n%s", out)
			}
			lives(2)
			if out := jobs("retry", "q"); !strings.Contains(out, "1 dead letters of q back in the queue") {
				t.Fatalf("peregrine jobs retry:\n%s", out)
			}
			lives(3)
			if out := jobs("delete", "q", id); !strings.Contains(out, "dead letter "+id+" of q deleted") {
				t.Fatalf("peregrine jobs delete q ID:\n%s", out)
			}
			if st := jobsStatus(t, cfg); st["dead"] != 0.0 {
				t.Errorf("after the delete: %v", st)
			}
			for _, args := range [][]string{{"dead", "q", "show", id}, {"retry", "q", id}, {"delete", "q", id}} {
				bad, err := exec.Command(binary, append([]string{"jobs", "-c", cfg}, args...)...).CombinedOutput()
				if err == nil || !strings.Contains(string(bad), "no such dead letter") {
					t.Errorf("jobs %v of a deleted dead letter: %v\n%s", args, err, bad)
				}
			}
		})
	}
}

// TestJobThatExitsFails (issue 25, item 18): exit() or die() in a consumer is no success, nor
// is an uncaught Error or a fatal error (the memory limit): the attempt fails, is retried,
// the job is dead-lettered with a reason that says so (die's message, the fatal error's), and
// the log says it, under both runtimes.
func TestJobThatExitsFails(t *testing.T) {
	for _, runtime := range []string{"native", "cli"} {
		t.Run(runtime, func(t *testing.T) {
			log := newJobLog(t)
			admin := freeAddr(t)
			s := jobsServer(t, runtime, pipelineYAML(t, "memory", 1, "100ms", "10s"), log.path, 1, admin)
			cfg := writeAdminConfig(t, admin)
			want := map[string]string{"exit": "exit", "exit-text": "leaving on purpose", "fatal": "undefined_function_on_purpose",
				"user-fatal": "PHP Fatal error: fatal on purpose in ", "oom": "PHP Fatal error: Allowed memory size of 16777216 bytes exhausted"}
			ids := map[string]string{}
			for do := range want {
				ids[push(t, s, 1, `{"do":"`+do+`"}`, "")[0]] = do
			}
			ok := push(t, s, 1, `{"do":"ok"}`, "")[0] // the consumers still work
			eventually(t, 30*time.Second, "five dead letters", func() bool { return jobsStatus(t, cfg)["dead"] == 5.0 })
			eventually(t, 30*time.Second, "the job that returns", func() bool { return log.done(t)[ok] == 1 })
			starts := map[string]int{}
			for _, e := range log.entries(t) {
				if e.event == "start" {
					starts[e.id]++
				}
				if e.event == "done" && ids[e.id] != "" {
					t.Errorf("a job that called %s was done", ids[e.id])
				}
			}
			for id, do := range ids {
				if starts[id] != 2 {
					t.Errorf("%s: began %d times, want 2 (retries: 1)", do, starts[id])
				}
				out, err := exec.Command(binary, "jobs", "-c", cfg, "dead", "q", "show", id).CombinedOutput()
				if err != nil || !strings.Contains(string(out), want[do]) {
					t.Errorf("%s: the dead letter does not say %q: %v\n%s", do, want[do], err, out)
				}
			}
			// The pipeline counts the job done once the broker took its acknowledgement, after
			// the consumer's line; each failure it counts before the retry or the burial.
			eventually(t, 30*time.Second, "the job that returns counted", func() bool { return jobsStatus(t, cfg)["done"] != 0.0 })
			if st := jobsStatus(t, cfg); st["done"] != 1.0 || st["failed"] != 10.0 {
				t.Errorf("counted %v done, %v failed; want 1 and 10", st["done"], st["failed"])
			}
			if n := s.log.count("job failed; retrying"); n != 5 {
				t.Errorf("%d log lines of a failed attempt retried, want 5", n)
			}
			if s.log.count("Allowed memory size") == 0 {
				t.Error("the log lacks the fatal error's message")
			}
		})
	}
}

// TestManyDelayedJobsDoNotHoldBackOneDueSooner (issue 25, item 20): on NATS, 10,000 jobs
// delayed by ten minutes wait in the broker; a job pushed after them with a delay of 2s runs
// while all of them still wait (it used to wait behind them: the delayed stream's consumer
// allowed 10,000 messages pending acknowledgement, and each waiting job is one), and the
// queue age it reports does not count its delay.
func TestManyDelayedJobsDoNotHoldBackOneDueSooner(t *testing.T) {
	log := newJobLog(t)
	admin := freeAddr(t)
	s := jobsServer(t, "native", pipelineYAML(t, "nats", 0, "100ms", "10s"), log.path, 1, admin)
	cfg := writeAdminConfig(t, admin)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { push(t, s, 1000, `{"do":"ok"}`, "&delay=600") })
	}
	wg.Wait()
	eventually(t, 60*time.Second, "10,000 delayed jobs", func() bool { return jobsStatus(t, cfg)["delayed"] == 10000.0 })
	id := push(t, s, 1, `{"do":"ok"}`, "&delay=2")[0]
	eventually(t, 60*time.Second, "the job delayed 2s done", func() bool { return log.done(t)[id] == 1 })
	st := jobsStatus(t, cfg)
	if st["delayed"] != 10000.0 || len(log.done(t)) != 1 {
		t.Errorf("%v delayed, %d done; want the 10,000 still waiting and the one done", st["delayed"], len(log.done(t)))
	}
	if age := st["queue_age_seconds"].(float64); age >= 2 {
		t.Errorf("queue age %.3fs: it counts the delay of 2s", age)
	}
	t.Logf("queue age of the job delayed 2s behind 10,000: %.3fs", st["queue_age_seconds"])
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
// consumers run jobs; the other, started after, finishes every job, those the dead server had
// begun after their lease. At least once: a job the dead server had finished but not
// acknowledged runs twice; the test reports how many.
func TestKill9ServerWhileJobsRun(t *testing.T) {
	for _, driver := range []string{"redis", "nats"} {
		t.Run(driver, func(t *testing.T) {
			log := newJobLog(t)
			p := pipelineYAML(t, driver, 3, "100ms", "2s")
			a := jobsServer(t, "cli", p, log.path, 2, "")
			ids := push(t, a, 20, `{"do":"sleep","ms":500}`, "")
			// A dies at work: each of its two consumers has 5 s of jobs and spends a few
			// milliseconds between two, so both hold one begun when the kill comes. B starts
			// after, however long that takes: A can finish nothing meanwhile.
			eventually(t, 30*time.Second, "A's consumers at work", func() bool { return len(log.entries(t)) >= 2 })
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			a.wait(t, 10*time.Second)
			jobsServer(t, "cli", p, log.path, 2, "")
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
			t.Logf("%d jobs: %d taken over from the killed server, %d done twice (at least once)", len(ids), reclaimed, dups)
		})
	}
}

// withKeys adds keys (YAML flow entries, e.g. "prefetch: 8") to a pipelineYAML entry.
func withKeys(pipeline, keys string) string {
	return strings.Replace(pipeline, " }\n", ", "+keys+" }\n", 1)
}

// jobsStatus returns pipeline q's line of peregrine jobs --json on the server whose admin
// listener cfg names.
func jobsStatus(t *testing.T, cfg string) map[string]any {
	t.Helper()
	out, err := exec.Command(binary, "jobs", "-c", cfg, "--json").Output()
	if err != nil {
		t.Fatalf("peregrine jobs --json: %v", err)
	}
	var list []map[string]any
	if err := json.Unmarshal(out, &list); err != nil || len(list) != 1 {
		t.Fatalf("peregrine jobs --json: %v\n%s", err, out)
	}
	return list[0]
}

// TestJobsFetchedAheadRunOnceOnTwoServers (issue 25, item 15): server A, one consumer, holds
// nine jobs (prefetch 8) that take about half the timeout each, so the last waits there two
// leases (timeout + 2s); server B on the same broker is idle. The leases of the jobs
// waiting on A are renewed: B takes none of them, each runs once, on A, as its first
// attempt, and with retries: 0 none goes to the dead letters. The lease (4.5 s, renewed every
// 1.1 s) is long enough that only a renewal held back over 3 s (a stall of the daemon, not
// the bug) would lose one.
func TestJobsFetchedAheadRunOnceOnTwoServers(t *testing.T) {
	for _, driver := range []string{"redis", "nats"} {
		t.Run(driver, func(t *testing.T) {
			log := newJobLog(t)
			p := withKeys(pipelineYAML(t, driver, 0, "100ms", "2500ms"), "prefetch: 8")
			adminA, adminB := freeAddr(t), freeAddr(t)
			a := jobsServer(t, "cli", p, log.path, 1, adminA)
			ids := push(t, a, 9, `{"do":"sleep","ms":1200}`, "")
			eventually(t, 30*time.Second, "A's first job", func() bool { return len(log.entries(t)) >= 1 })
			jobsServer(t, "cli", p, log.path, 1, adminB)
			cfgA, cfgB := writeAdminConfig(t, adminA), writeAdminConfig(t, adminB)
			// RUNNING counts the jobs begun and not yet settled, not those held: on each server
			// one running and the one before it, whose settlement may still be on its way.
			maxRunning := 0.0
			eventually(t, 60*time.Second, "every job done", func() bool {
				maxRunning = max(maxRunning, jobsStatus(t, cfgA)["running"].(float64))
				return len(log.done(t)) == len(ids)
			})
			if maxRunning > 4 {
				t.Errorf("RUNNING was %v with one consumer on each of two servers (A held 9 jobs)", maxRunning)
			}
			eventually(t, 30*time.Second, "an empty queue", func() bool {
				s := jobsStatus(t, cfgA)
				return s["queued"] == 0.0 && s["running"] == 0.0
			})
			starts := map[string]int{}
			pids := map[int]bool{}
			for _, e := range log.entries(t) {
				if e.event == "start" {
					starts[e.id]++
					pids[e.pid] = true
					if e.attempt != 1 {
						t.Errorf("job %s began as attempt %d", e.id, e.attempt)
					}
				}
			}
			for _, id := range ids {
				if starts[id] != 1 || log.done(t)[id] != 1 {
					t.Errorf("job %s began %d times, done %d times", id, starts[id], log.done(t)[id])
				}
			}
			if len(pids) != 1 {
				t.Errorf("the jobs held by A ran on %d consumers, want A's one", len(pids))
			}
			for _, cfg := range []string{cfgA, cfgB} {
				if s := jobsStatus(t, cfg); s["dead"] != 0.0 || s["failed"] != 0.0 {
					t.Errorf("dead letters or failures: %v", s)
				}
			}
		})
	}
}

// TestKill9LosesNoJobFetchedAhead (issue 25, item 16): with retries: 0, server A (one consumer,
// prefetch 8) is killed with SIGKILL while it holds jobs it never began; server B, started
// after, runs every one of them as a first attempt once their leases expire. Only the jobs A
// had begun may go to the dead letters (their server died during their last attempt).
func TestKill9LosesNoJobFetchedAhead(t *testing.T) {
	for _, driver := range []string{"redis", "nats"} {
		t.Run(driver, func(t *testing.T) {
			log := newJobLog(t)
			p := withKeys(pipelineYAML(t, driver, 0, "100ms", "2s"), "prefetch: 8")
			a := jobsServer(t, "cli", p, log.path, 1, "")
			ids := push(t, a, 20, `{"do":"sleep","ms":300}`, "")
			eventually(t, 30*time.Second, "A at work", func() bool { return len(log.done(t)) >= 1 })
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			a.wait(t, 10*time.Second)
			begunOnA := map[string]bool{} // A's orphaned consumer may finish the job it ran; it begins none
			for _, e := range log.entries(t) {
				if e.event == "start" {
					begunOnA[e.id] = true
				}
			}
			adminB := freeAddr(t)
			jobsServer(t, "cli", p, log.path, 2, adminB)
			cfgB := writeAdminConfig(t, adminB)
			dead := func() map[string]bool {
				out, err := exec.Command(binary, "jobs", "-c", cfgB, "dead", "q", "--json").Output()
				var list []struct{ ID, Error string }
				if err != nil || json.Unmarshal(out, &list) != nil {
					t.Fatalf("peregrine jobs dead q --json: %v\n%s", err, out)
				}
				ids := map[string]bool{}
				for _, j := range list {
					ids[j.ID] = true
				}
				return ids
			}
			eventually(t, 60*time.Second, "every job done or dead", func() bool {
				d, dl := log.done(t), dead()
				for _, id := range ids {
					if d[id] == 0 && !dl[id] {
						return false
					}
				}
				return true
			})
			eventually(t, 30*time.Second, "an empty queue", func() bool {
				s := jobsStatus(t, cfgB)
				return s["queued"] == 0.0 && s["running"] == 0.0
			})
			d, dl := log.done(t), dead()
			unlogged := 0 // given to A's consumer (begun, for the broker) before it logged its start
			for _, id := range ids {
				switch {
				case dl[id] && !begunOnA[id]:
					unlogged++
				case !begunOnA[id] && d[id] != 1:
					t.Errorf("job %s, never begun on A, done %d times", id, d[id])
				}
			}
			if unlogged > 1 {
				t.Errorf("%d jobs A had not begun are dead letters; at most the one its consumer had been given may be", unlogged)
			}
			for _, e := range log.entries(t) {
				if e.event == "start" && !begunOnA[e.id] && (e.attempt != 1 || dl[e.id]) {
					t.Errorf("job %s, never begun on A, began on B as attempt %d (dead letter: %v)", e.id, e.attempt, dl[e.id])
				}
			}
			s := jobsStatus(t, cfgB)
			t.Logf("A logged the start of %d of %d jobs before it died; %d more had been given to its consumer; B ran the other %d; %v dead letters", len(begunOnA), len(ids), unlogged, len(ids)-len(begunOnA)-unlogged, s["dead"])
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
	// Laravel's failed-job store (queue.failed: database-uuids), as its migration makes it.
	db := filepath.Join(dir, "storage", "database.sqlite")
	if out, err := exec.Command("php", "-r", `(new PDO('sqlite:'.$argv[1]))->exec('CREATE TABLE failed_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT,
		uuid VARCHAR UNIQUE, connection TEXT, queue TEXT, payload TEXT, exception TEXT, failed_at DATETIME DEFAULT CURRENT_TIMESTAMP)');`, db).CombinedOutput(); err != nil {
		t.Fatalf("create failed_jobs: %v\n%s", err, out)
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
	// Issue 25, item 19: the job Laravel failed for good is in failed_jobs, once (recorded
	// on JobFailed, which Laravel raises after the job's failed()).
	failedJobs := func() string {
		out, err := exec.Command("php", "-r", `foreach ((new PDO('sqlite:'.$argv[1]))->query('SELECT connection, queue, payload, exception FROM failed_jobs') as $r) {
		echo $r['connection'], ' ', $r['queue'], ' ', json_decode($r['payload'], true)['displayName'], ' ', strtok($r['exception'], "\n"), "\n"; }`, db).CombinedOutput()
		if err != nil {
			t.Fatalf("read failed_jobs: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	eventually(t, 30*time.Second, "a row in failed_jobs", func() bool { return failedJobs() != "" })
	if got := failedJobs(); strings.Count(got, "\n") != 0 ||
		!strings.HasPrefix(got, `peregrine q App\Jobs\RecordJob RuntimeException: failing on purpose`) {
		t.Errorf("failed_jobs holds:\n%s\nwant the job that threw, once", got)
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

// TestSIGSTOPPastItsLeaseRunsNoJobTwice: server A (one consumer, prefetch 8) is stopped with
// SIGSTOP while it runs a job and holds others ahead, for longer than their leases; server B
// runs them meanwhile; then A is continued. The guarantee: every job A had not begun runs once,
// on B (A, resumed, finds its leases lost and begins none of them); the one job A was running
// when it stalled (something did fail: its server stopped past its lease) ran on A and again on
// B as its next attempt, and of the two settlements the first stands (no second retry, no dead
// letter, nothing left queued or running).
func TestSIGSTOPPastItsLeaseRunsNoJobTwice(t *testing.T) {
	for _, driver := range []string{"redis", "nats"} {
		t.Run(driver, func(t *testing.T) {
			log := newJobLog(t)
			p := withKeys(pipelineYAML(t, driver, 3, "100ms", "2s"), "prefetch: 8") // a lease of 4s
			adminA, adminB := freeAddr(t), freeAddr(t)
			a := jobsServer(t, "cli", p, log.path, 1, adminA)
			ids := push(t, a, 12, `{"do":"sleep","ms":1000}`, "")
			eventually(t, 30*time.Second, "A's first job", func() bool { return len(log.entries(t)) >= 1 })
			pidA := log.entries(t)[0].pid // A's one consumer
			if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			continued := false
			cont := func() {
				if !continued {
					continued = true
					_ = a.cmd.Process.Signal(syscall.SIGCONT)
				}
			}
			t.Cleanup(cont)
			jobsServer(t, "cli", p, log.path, 4, adminB)
			cfgA, cfgB := writeAdminConfig(t, adminA), writeAdminConfig(t, adminB)
			// B runs every job, the one A was running included (its lease expired too).
			eventually(t, 60*time.Second, "every job done on B", func() bool {
				d := log.done(t)
				for _, id := range ids {
					if d[id] == 0 {
						return false
					}
				}
				return true
			})
			cont()
			eventually(t, 30*time.Second, "A back", func() bool {
				r, err := doErr(context.Background(), "GET", "http://"+adminA+"/jobs", nil)
				return err == nil && r.Status == 200
			})
			eventually(t, 30*time.Second, "an empty queue", func() bool {
				s := jobsStatus(t, cfgB)
				return s["queued"] == 0.0 && s["running"] == 0.0 && s["delayed"] == 0.0
			})
			// A settles what it was running, and begins nothing it held: its leases are lost.
			eventually(t, 30*time.Second, "A idle", func() bool { return jobsStatus(t, cfgA)["running"] == 0.0 })
			starts, begunOnA := map[string]int{}, map[string]bool{}
			for _, e := range log.entries(t) {
				if e.event == "start" {
					starts[e.id]++
					if e.pid == pidA {
						begunOnA[e.id] = true
					}
				}
			}
			if len(begunOnA) > 1 { // the job it ran when stopped; resumed, it begins none it held
				t.Errorf("A began %d jobs; want the one it ran when it was stopped", len(begunOnA))
			}
			for _, id := range ids {
				want := 1
				if begunOnA[id] {
					want = 2 // on A, then on B after A's lease expired
				}
				if starts[id] != want {
					t.Errorf("job %s (begun on A before its stop: %v) began %d times, want %d", id, begunOnA[id], starts[id], want)
				}
			}
			// A, resumed, may count its job failed (its timeout ran while it was stopped): the
			// retry it then publishes must not reach the broker, B having settled the job.
			if s := jobsStatus(t, cfgA); s["dead"] != 0.0 || s["failed"].(float64) > 1 {
				t.Errorf("A: dead letters or failures: %v", s)
			}
			if s := jobsStatus(t, cfgB); s["dead"] != 0.0 || s["failed"] != 0.0 {
				t.Errorf("B: dead letters or failures: %v", s)
			}
			s := jobsStatus(t, cfgB)
			if s["queued"] != 0.0 || s["delayed"] != 0.0 || s["running"] != 0.0 {
				t.Errorf("after A resumed, the queue is %v; want it empty (a second settlement added a job)", s)
			}
			t.Logf("A had begun %d of %d jobs when it stopped", len(begunOnA), len(ids))
		})
	}
}
