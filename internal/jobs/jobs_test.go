package jobs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

const (
	redisAddr = "127.0.0.1:6379"
	natsURL   = "nats://127.0.0.1:4222"
)

// ensureService makes sure something listens on addr, starting it with argv if not; the test
// is skipped only when argv's program is not installed.
func ensureService(t *testing.T, addr string, argv ...string) {
	t.Helper()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
		return
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Skipf("%s is not running and %s is not installed", addr, argv[0])
	}
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("start %v: %v\n%s", argv, err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not come up after %v", addr, argv)
}

// EnsureRedis and EnsureNATS start the services as the machine's notes say.
func ensureRedis(t *testing.T) {
	ensureService(t, redisAddr, "redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379",
		"--save", "", "--appendonly", "no")
}

func ensureNATS(t *testing.T) {
	ensureService(t, "127.0.0.1:4222", "start-stop-daemon", "--start", "--oknodo", "--background", "--exec",
		"/usr/sbin/nats-server", "--", "-a", "127.0.0.1", "-p", "4222", "-js", "-sd", "/var/lib/nats-server")
}

// driverMaker returns a fresh driver on the same queue each time it is called (two servers on
// one broker), cleaned up with the test.
type driverMaker func(t *testing.T, timeout time.Duration) Driver

func memoryDrivers(t *testing.T) driverMaker {
	m := NewMemory()
	t.Cleanup(func() { _ = m.Close() })
	return func(*testing.T, time.Duration) Driver { return m }
}

func redisDrivers(t *testing.T) driverMaker {
	ensureRedis(t)
	stream := fmt.Sprintf("peregrine-test:%s:%s", t.Name(), newID()[:8])
	t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer rdb.Close()
		rdb.Del(context.Background(), stream, stream+":delayed", stream+":dead")
	})
	return func(t *testing.T, timeout time.Duration) Driver {
		d, err := NewRedis(context.Background(), RedisOptions{Address: redisAddr, Stream: stream, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
}

func natsDrivers(t *testing.T) driverMaker {
	ensureNATS(t)
	stream := "PEREGRINE_TEST_" + newID()[:12]
	t.Cleanup(func() {
		nc, err := nats.Connect(natsURL)
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		for _, s := range []string{stream, stream + "_DELAYED", stream + "_DEAD"} {
			_ = js.DeleteStream(context.Background(), s)
		}
	})
	return func(t *testing.T, timeout time.Duration) Driver {
		d, err := NewNATS(context.Background(), NATSOptions{URL: natsURL, Stream: stream, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
}

var drivers = map[string]func(t *testing.T) driverMaker{
	"memory": memoryDrivers,
	"redis":  redisDrivers,
	"nats":   natsDrivers,
}

func forEachDriver(t *testing.T, f func(t *testing.T, name string, mk driverMaker)) {
	for _, name := range []string{"memory", "redis", "nats"} {
		t.Run(name, func(t *testing.T) { f(t, name, drivers[name](t)) })
	}
}

// runs records every attempt a pipeline makes.
type runs struct {
	mu       sync.Mutex
	attempts map[string][]time.Time // by job id
	jobs     map[string]*Job        // last seen
	changed  chan struct{}
}

func newRuns() *runs {
	return &runs{attempts: map[string][]time.Time{}, jobs: map[string]*Job{}, changed: make(chan struct{}, 1)}
}

func (r *runs) record(j *Job) {
	r.mu.Lock()
	r.attempts[j.ID] = append(r.attempts[j.ID], time.Now())
	c := *j
	r.jobs[j.ID] = &c
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds (checked under the lock), failing after a deadline.
func (r *runs) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func consume(t *testing.T, p *Pipeline, n int, h Handler) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Consume(ctx, n, h) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitStats(t *testing.T, d Driver, what string, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := d.Stats(context.Background())
		if err == nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: stats %+v, err %v", what, s, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestEveryJobOnceWhenNothingFails(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string, mk driverMaker) {
		// Two pipelines on the same queue: two servers on one broker (one memory queue).
		p1 := New(Options{Name: "q", Driver: mk(t, 10*time.Second), Retries: 1})
		p2 := New(Options{Name: "q", Driver: mk(t, 10*time.Second), Retries: 1})
		r := newRuns()
		h := func(_ context.Context, j *Job) error { r.record(j); return nil }
		const n = 200
		ids := map[string]bool{}
		for i := range n {
			p := []*Pipeline{p1, p2}[i%2]
			id, err := p.Push(context.Background(), fmt.Sprintf(`{"n":%d}`, i), map[string]string{"k": "v"}, 0)
			if err != nil {
				t.Fatal(err)
			}
			ids[id] = true
		}
		consume(t, p1, 3, h)
		consume(t, p2, 3, h)
		r.waitFor(t, "every job", func() bool { return len(r.attempts) == n })
		waitStats(t, p1.opts.Driver, "an empty queue", func(s Stats) bool { return s == Stats{} })
		r.mu.Lock()
		defer r.mu.Unlock()
		for id, at := range r.attempts {
			if !ids[id] || len(at) != 1 {
				t.Errorf("job %s ran %d times (pushed: %v)", id, len(at), ids[id])
			}
			if j := r.jobs[id]; j.Attempt != 1 || j.Headers["k"] != "v" || j.Pipeline != "q" {
				t.Errorf("job %+v", j)
			}
		}
	})
}

func TestRetriesWithBackoffThenDeadLetter(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string, mk driverMaker) {
		d := mk(t, 10*time.Second)
		const backoff = 200 * time.Millisecond
		p := New(Options{Name: "q", Driver: d, Retries: 2, Backoff: backoff, DeadLetter: true})
		r := newRuns()
		var fail sync.Map
		consume(t, p, 2, func(_ context.Context, j *Job) error {
			r.record(j)
			if _, ok := fail.Load(j.Payload); ok {
				return fmt.Errorf("failure %d", j.Attempt)
			}
			return nil
		})
		fail.Store("bad", true)
		id, err := p.Push(context.Background(), "bad", nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		r.waitFor(t, "three attempts", func() bool { return len(r.attempts[id]) == 3 })
		waitStats(t, d, "one dead letter and nothing else", func(s Stats) bool { return s == Stats{Dead: 1} })
		r.mu.Lock()
		at, last := r.attempts[id], r.jobs[id]
		r.mu.Unlock()
		// Each retry waits at least its backoff: 200ms, then 400ms.
		for i, want := range []time.Duration{backoff, 2 * backoff} {
			if gap := at[i+1].Sub(at[i]); gap < want-5*time.Millisecond {
				t.Errorf("retry %d came %v after the failure, before its backoff %v", i+1, gap, want)
			}
		}
		if last.Attempt != 3 || last.Error != "failure 2" {
			t.Errorf("last attempt %d, error %q; want 3 and the previous failure", last.Attempt, last.Error)
		}
		if st := p.Status(context.Background(), name); st.Failed != 3 || st.Retried != 2 || st.DeadLettered != 1 || st.Done != 0 {
			t.Errorf("counters %+v", st)
		}

		// Retry moves it back as a first attempt, which now succeeds.
		fail.Delete("bad")
		if n, err := p.Retry(context.Background()); err != nil || n != 1 {
			t.Fatalf("Retry = %d, %v", n, err)
		}
		r.waitFor(t, "the revived attempt", func() bool { return len(r.attempts[id]) == 4 })
		r.mu.Lock()
		if j := r.jobs[id]; j.Attempt != 1 {
			t.Errorf("revived job attempt %d, want 1", j.Attempt)
		}
		r.mu.Unlock()
		waitStats(t, d, "an empty queue", func(s Stats) bool { return s == Stats{} })
	})
}

func TestWithoutDeadLetterTheJobIsDropped(t *testing.T) {
	d := NewMemory()
	p := New(Options{Name: "q", Driver: d, Retries: 0})
	r := newRuns()
	consume(t, p, 1, func(_ context.Context, j *Job) error { r.record(j); return errors.New("no") })
	if _, err := p.Push(context.Background(), "x", nil, 0); err != nil {
		t.Fatal(err)
	}
	waitStats(t, d, "nothing left", func(s Stats) bool { return s == Stats{} && p.dead.Load() == 1 })
}

func TestDelayedJobWaits(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string, mk driverMaker) {
		d := mk(t, 10*time.Second)
		p := New(Options{Name: "q", Driver: d})
		r := newRuns()
		consume(t, p, 1, func(_ context.Context, j *Job) error { r.record(j); return nil })
		const delay = 700 * time.Millisecond
		pushed := time.Now()
		late, err := p.Push(context.Background(), "late", nil, delay)
		if err != nil {
			t.Fatal(err)
		}
		if s, _ := d.Stats(context.Background()); s.Delayed != 1 {
			t.Errorf("stats right after a delayed push: %+v", s)
		}
		soon, err := p.Push(context.Background(), "soon", nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		r.waitFor(t, "the delayed job", func() bool { return len(r.attempts[late]) == 1 })
		r.mu.Lock()
		defer r.mu.Unlock()
		if ran := r.attempts[late][0].Sub(pushed); ran < delay-5*time.Millisecond {
			t.Errorf("a job delayed %v ran after %v", delay, ran)
		}
		if !r.attempts[soon][0].Before(r.attempts[late][0]) {
			t.Error("the job pushed without delay ran after the delayed one")
		}
	})
}

// TestReclaimAfterServerDies: a server receives a job and dies without settling it; another
// server on the same broker runs it after the timeout, as the next attempt.
func TestReclaimAfterServerDies(t *testing.T) {
	for _, name := range []string{"redis", "nats"} {
		t.Run(name, func(t *testing.T) {
			mk := drivers[name](t)
			const timeout = 300 * time.Millisecond
			dying := mk(t, timeout)
			p := New(Options{Name: "q", Driver: dying, Retries: 1})
			id, err := p.Push(context.Background(), "x", nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ds, err := dying.Receive(context.Background(), 1)
			if err != nil || len(ds) != 1 || ds[0].Job.ID != id {
				t.Fatalf("Receive = %v, %v", ds, err)
			}
			_ = dying.Close() // dies holding the job

			other := mk(t, timeout)
			p2 := New(Options{Name: "q", Driver: other, Retries: 1})
			r := newRuns()
			consume(t, p2, 1, func(_ context.Context, j *Job) error { r.record(j); return nil })
			r.waitFor(t, "the reclaimed job", func() bool { return len(r.attempts[id]) == 1 })
			r.mu.Lock()
			if j := r.jobs[id]; j.Attempt != 2 {
				t.Errorf("reclaimed job's attempt = %d, want 2", j.Attempt)
			}
			r.mu.Unlock()
			waitStats(t, other, "an empty queue", func(s Stats) bool { return s == Stats{} })
		})
	}
}

// TestReclaimedPastItsLastAttemptIsBuried: a job whose server died during its last attempt goes
// to the dead letters without running again.
func TestReclaimedPastItsLastAttemptIsBuried(t *testing.T) {
	mk := redisDrivers(t)
	dying := mk(t, 200*time.Millisecond)
	p := New(Options{Name: "q", Driver: dying, Retries: 0, DeadLetter: true})
	if _, err := p.Push(context.Background(), "x", nil, 0); err != nil {
		t.Fatal(err)
	}
	if ds, err := dying.Receive(context.Background(), 1); err != nil || len(ds) != 1 {
		t.Fatalf("Receive = %v, %v", ds, err)
	}
	_ = dying.Close()
	other := mk(t, 200*time.Millisecond)
	p2 := New(Options{Name: "q", Driver: other, Retries: 0, DeadLetter: true})
	ran := make(chan struct{}, 1)
	consume(t, p2, 1, func(context.Context, *Job) error { ran <- struct{}{}; return nil })
	waitStats(t, other, "a dead letter", func(s Stats) bool { return s.Dead == 1 && s.Running == 0 })
	select {
	case <-ran:
		t.Error("a job past its last attempt ran again")
	default:
	}
}

func TestPushRefusesOversizedPayload(t *testing.T) {
	p := New(Options{Name: "q", Driver: NewMemory()})
	big := string(make([]byte, MaxPayload+1))
	if _, err := p.Push(context.Background(), big, nil, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if _, err := p.Push(context.Background(), big[:MaxPayload], nil, 0); err != nil {
		t.Fatalf("a payload of exactly MaxPayload: %v", err)
	}
	many := map[string]string{}
	for i := range MaxHeaders + 1 {
		many[fmt.Sprint("h", i)] = "v"
	}
	if _, err := p.Push(context.Background(), "x", many, 0); !errors.Is(err, ErrTooLarge) {
		t.Errorf("%d headers: %v, want ErrTooLarge", len(many), err)
	}
	if _, err := p.Push(context.Background(), "x", map[string]string{"h": strings.Repeat("v", MaxHeaderBytes)}, 0); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a header of %d bytes: %v, want ErrTooLarge", MaxHeaderBytes, err)
	}
}

func TestPauseStopsReceiving(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string, mk driverMaker) {
		d := mk(t, 10*time.Second)
		p := New(Options{Name: "q", Driver: d})
		r := newRuns()
		consume(t, p, 3, func(_ context.Context, j *Job) error { r.record(j); return nil })
		// The loops are waiting for a job when the pause comes: they stop waiting.
		time.Sleep(100 * time.Millisecond) // let them reach Receive; the assertion holds without it
		p.Pause()
		time.Sleep(100 * time.Millisecond) // a receive the pause did not stop would take the job
		id, err := p.Push(context.Background(), "x", nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		waitStats(t, d, "the job queued", func(s Stats) bool { return s.Queued == 1 })
		time.Sleep(1500 * time.Millisecond)
		if s, _ := d.Stats(context.Background()); s != (Stats{Queued: 1}) {
			t.Errorf("a paused pipeline's job: %+v", s)
		}
		if !p.Status(context.Background(), name).Paused {
			t.Error("status does not say paused")
		}
		p.Resume()
		r.waitFor(t, "the job after resume", func() bool { return len(r.attempts[id]) == 1 })
	})
}

// TestSlowJobsAreNotHeldAhead: a pipeline holds up to MaxAhead jobs per consumer while jobs
// are fast, and fewer once they take a good part of the timeout (here a quarter: one ahead).
func TestSlowJobsAreNotHeldAhead(t *testing.T) {
	d := NewMemory()
	p := New(Options{Name: "q", Driver: d, Timeout: 400 * time.Millisecond})
	var mu sync.Mutex
	maxHeld, ran := 0, 0
	consume(t, p, 1, func(context.Context, *Job) error {
		s, _ := d.Stats(context.Background())
		mu.Lock()
		ran++
		if ran > 2*MaxAhead { // the first fetch knew no job's time yet, and its jobs end together
			maxHeld = max(maxHeld, int(s.Running))
		}
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		return nil
	})
	for range 4 * MaxAhead {
		if _, err := p.Push(context.Background(), "x", nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, d, "every job done", func(s Stats) bool { return s == Stats{} })
	if maxHeld > 3 { // 1 running, 1 ahead, and the one a wait for a free runner may add
		t.Errorf("%d jobs held at once for one consumer of 100ms jobs with a 400ms timeout", maxHeld)
	}
}

func TestRetryAfterSetsTheDelay(t *testing.T) {
	d := NewMemory()
	p := New(Options{Name: "q", Driver: d, Retries: 1, Backoff: time.Hour})
	r := newRuns()
	consume(t, p, 1, func(_ context.Context, j *Job) error {
		r.record(j)
		if j.Attempt == 1 {
			return &RetryAfter{Delay: 300 * time.Millisecond, Err: errors.New("released")}
		}
		return nil
	})
	id, _ := p.Push(context.Background(), "x", nil, 0)
	r.waitFor(t, "the retry after 300ms, not the hour's backoff", func() bool { return len(r.attempts[id]) == 2 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if gap := r.attempts[id][1].Sub(r.attempts[id][0]); gap < 295*time.Millisecond {
		t.Errorf("the retry came %v after the release of 300ms", gap)
	}
}
