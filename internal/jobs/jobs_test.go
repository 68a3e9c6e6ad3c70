package jobs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
	stream := fmt.Sprintf("peregrine-test-jobs:%s:%s", t.Name(), newID()[:8])
	t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer rdb.Close()
		rdb.Del(context.Background(), stream, stream+":delayed", stream+":dead", stream+":started")
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
	stream := "PEREGRINE_TEST_JOBS_" + newID()[:12]
	t.Cleanup(func() {
		nc, err := nats.Connect(natsURL)
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		for _, s := range []string{stream, stream + "_DELAYED", stream + "_DEAD", stream + "_STARTED"} {
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
		// The broker shows the burial before the pipeline counts it: wait for both.
		waitStats(t, d, "one dead letter and nothing else", func(s Stats) bool { return s == Stats{Dead: 1} && p.dead.Load() == 1 })
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
		// Long enough that the test, stalled on a loaded machine, still pushes the job without
		// delay and reads the stats before the delayed one is due.
		const delay = 2 * time.Second
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
		r.waitFor(t, "both jobs", func() bool { return len(r.attempts[late]) == 1 && len(r.attempts[soon]) == 1 })
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
// TestReclaimAfterServerDies: a job whose server died is received by another once its lease
// expires; its attempt counts the runs that had begun, not the deliveries: one received and
// never begun is the same attempt, one begun is the next.
func TestReclaimAfterServerDies(t *testing.T) {
	for _, name := range []string{"redis", "nats"} {
		for _, begun := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/begun=%v", name, begun), func(t *testing.T) {
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
				if begun {
					if err := dying.Start(context.Background(), ds[0]); err != nil {
						t.Fatal(err)
					}
					waitStats(t, dying, "one running", func(s Stats) bool { return s.Running == 1 && s.Queued == 0 })
				} else {
					waitStats(t, dying, "one held, not running", func(s Stats) bool { return s.Running == 0 && s.Queued == 1 })
				}
				_ = dying.Close() // dies holding the job

				other := mk(t, timeout)
				p2 := New(Options{Name: "q", Driver: other, Retries: 1, Timeout: timeout})
				r := newRuns()
				consume(t, p2, 1, func(_ context.Context, j *Job) error { r.record(j); return nil })
				r.waitFor(t, "the reclaimed job", func() bool { return len(r.attempts[id]) == 1 })
				want := map[bool]int{false: 1, true: 2}[begun]
				r.mu.Lock()
				if j := r.jobs[id]; j.Attempt != want {
					t.Errorf("reclaimed job's attempt = %d, want %d", j.Attempt, want)
				}
				r.mu.Unlock()
				waitStats(t, other, "an empty queue", func(s Stats) bool { return s == Stats{} })
			})
		}
	}
}

// TestReclaimedPastItsLastAttemptIsBuried: a job whose server died during its last attempt goes
// to the dead letters without running again; one its server had received and not begun runs.
func TestReclaimedPastItsLastAttemptIsBuried(t *testing.T) {
	for _, name := range []string{"redis", "nats"} {
		t.Run(name, func(t *testing.T) {
			mk := drivers[name](t)
			const timeout = 200 * time.Millisecond
			dying := mk(t, timeout)
			p := New(Options{Name: "q", Driver: dying, Retries: 0, DeadLetter: true})
			begunID, _ := p.Push(context.Background(), "begun", nil, 0)
			heldID, _ := p.Push(context.Background(), "held", nil, 0)
			ds, err := dying.Receive(context.Background(), 2)
			if err != nil || len(ds) != 2 {
				t.Fatalf("Receive = %v, %v", ds, err)
			}
			for _, d := range ds {
				if d.Job.ID == begunID {
					if err := dying.Start(context.Background(), d); err != nil {
						t.Fatal(err)
					}
				}
			}
			_ = dying.Close()
			other := mk(t, timeout)
			p2 := New(Options{Name: "q", Driver: other, Retries: 0, DeadLetter: true, Timeout: timeout})
			r := newRuns()
			consume(t, p2, 1, func(_ context.Context, j *Job) error { r.record(j); return nil })
			waitStats(t, other, "a dead letter", func(s Stats) bool { return s.Dead == 1 && s.Running == 0 && s.Queued == 0 })
			r.waitFor(t, "the job held and not begun", func() bool { return len(r.attempts[heldID]) == 1 })
			r.mu.Lock()
			defer r.mu.Unlock()
			if len(r.attempts[begunID]) != 0 {
				t.Error("a job past its last attempt ran again")
			}
			dead, err := other.DeadLetters(context.Background(), 10, 0)
			if err != nil || len(dead) != 1 || dead[0].ID != begunID || !strings.Contains(dead[0].Error, "died during its last attempt") {
				t.Errorf("dead letters = %+v, %v", dead, err)
			}
		})
	}
}

// TestHeldJobsKeepTheirLease: two servers on one broker, the first holding more jobs ahead
// than it can run within the lease (each job takes half the lease; the last waits two
// leases): renewed, no job is taken by the other while it waits, and each runs once. The
// lease is 4.1s, so that the test tolerates a stall of three renewals (3s) on a loaded
// machine: with 2.1s it failed twice under a load average of 10.
func TestHeldJobsKeepTheirLease(t *testing.T) {
	for _, name := range []string{"redis", "nats"} {
		t.Run(name, func(t *testing.T) {
			mk := drivers[name](t)
			const timeout = 2100 * time.Millisecond // a lease of 4.1s
			a := New(Options{Name: "q", Driver: mk(t, timeout), Timeout: timeout, Prefetch: 8, Retries: 3})
			r := newRuns()
			var onB atomic.Int32
			slow := func(_ context.Context, j *Job) error {
				r.record(j)
				time.Sleep((timeout + ReclaimGrace) / 2)
				return nil
			}
			var ids []string
			for range 5 {
				id, err := a.Push(context.Background(), "x", nil, 0)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			consume(t, a, 1, slow)
			// A holds all five once its first job ran (a single receive of up to nine).
			r.waitFor(t, "A's first job", func() bool { return len(r.attempts) == 1 })
			b := New(Options{Name: "q", Driver: mk(t, timeout), Timeout: timeout, Prefetch: 8, Retries: 3})
			consume(t, b, 1, func(ctx context.Context, j *Job) error { onB.Add(1); return slow(ctx, j) })
			r.waitFor(t, "every job", func() bool { return len(r.attempts) == len(ids) })
			if n := onB.Load(); n != 0 {
				t.Errorf("B took %d of the jobs A held: their leases lapsed", n)
			}
			waitStats(t, a.opts.Driver, "an empty queue", func(s Stats) bool { return s == Stats{} })
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, id := range ids {
				if n := len(r.attempts[id]); n != 1 || r.jobs[id].Attempt != 1 {
					t.Errorf("job %s ran %d times (last attempt %d)", id, n, r.jobs[id].Attempt)
				}
			}
		})
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

// TestPrefetchBoundsTheJobsHeld: a pipeline holds at most workers × (1 + Prefetch) jobs and
// runs at most workers at once.
func TestPrefetchBoundsTheJobsHeld(t *testing.T) {
	for _, prefetch := range []int{0, 1, 3} {
		t.Run(fmt.Sprint(prefetch), func(t *testing.T) {
			d := NewMemory()
			p := New(Options{Name: "q", Driver: d, Prefetch: prefetch})
			const workers = 2
			for range 20 {
				if _, err := p.Push(context.Background(), "x", nil, 0); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			maxHeld, running, maxRunning := 0, 0, 0
			consume(t, p, workers, func(context.Context, *Job) error {
				d.mu.Lock()
				mu.Lock()
				maxHeld = max(maxHeld, len(d.running))
				running++
				maxRunning = max(maxRunning, running)
				mu.Unlock()
				d.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
			waitStats(t, d, "every job done", func(s Stats) bool { return s == Stats{} })
			mu.Lock()
			defer mu.Unlock()
			if maxHeld > workers*(1+prefetch) || maxRunning > workers {
				t.Errorf("held %d, running %d at most; want at most %d and %d", maxHeld, maxRunning, workers*(1+prefetch), workers)
			}
		})
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

// TestALeaseLostIsNeverBegun: a server that stalled past its lease (it stopped renewing) finds
// out, from Renew or from Start, that another server took the job over, and does not begin
// it; the other server's Start succeeds and the job is settled once (redis: the only driver
// that can tell).
func TestALeaseLostIsNeverBegun(t *testing.T) {
	mk := redisDrivers(t)
	const timeout = 100 * time.Millisecond // a lease of 2.1s
	stalled, other := mk(t, timeout), mk(t, timeout)
	p := New(Options{Name: "q", Driver: stalled})
	if _, err := p.Push(context.Background(), "x", nil, 0); err != nil {
		t.Fatal(err)
	}
	mine, err := stalled.Receive(context.Background(), 1)
	if err != nil || len(mine) != 1 {
		t.Fatalf("Receive = %v, %v", mine, err)
	}
	if lost, err := stalled.Renew(context.Background(), mine); err != nil || len(lost) != 0 {
		t.Fatalf("Renew of a job held = %v, %v", lost, err)
	}
	// The other server takes it once the lease expired (Receive reclaims past it).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var theirs []*Delivery
	for len(theirs) == 0 && ctx.Err() == nil {
		theirs, err = other.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(theirs) != 1 || theirs[0].Job.ID != mine[0].Job.ID || theirs[0].Job.Attempt != 1 {
		t.Fatalf("the other server received %+v", theirs)
	}
	if lost, err := stalled.Renew(context.Background(), mine); err != nil || len(lost) != 1 {
		t.Errorf("Renew of a job taken over = %v, %v; want it lost", lost, err)
	}
	if err := stalled.Start(context.Background(), mine[0]); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Start of a job taken over = %v, want ErrLeaseLost", err)
	}
	if err := other.Start(context.Background(), theirs[0]); err != nil {
		t.Fatal(err)
	}
	waitStats(t, other, "one running", func(s Stats) bool { return s.Running == 1 })
	if err := other.Ack(context.Background(), theirs[0]); err != nil {
		t.Fatal(err)
	}
	waitStats(t, other, "an empty queue", func(s Stats) bool { return s == Stats{} })
}

// TestPauseGivesBackTheJobsHeld: a pause gives the jobs received ahead back to the broker at
// once, while the job running goes on to its end; a resume takes them again.
func TestPauseGivesBackTheJobsHeld(t *testing.T) {
	d := NewMemory()
	p := New(Options{Name: "q", Driver: d, Prefetch: 3})
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	r := newRuns()
	consume(t, p, 1, func(_ context.Context, j *Job) error {
		r.record(j)
		if j.Payload == "first" {
			<-release
		}
		return nil
	})
	t.Cleanup(unblock) // before consume's cleanup waits for the job, should the test fail
	for _, payload := range []string{"first", "2", "3", "4"} {
		if _, err := p.Push(context.Background(), payload, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	held := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.running)
	}
	r.waitFor(t, "the first job running", func() bool { return len(r.attempts) == 1 })
	waitStats(t, d, "four held, one running", func(s Stats) bool { return held() == 4 && s.Running == 1 })
	p.Pause()
	waitStats(t, d, "three given back", func(s Stats) bool { return held() == 1 && s.Queued == 3 && s.Running == 1 })
	unblock()
	waitStats(t, d, "the first done, the others queued", func(s Stats) bool { return s == Stats{Queued: 3} })
	p.Resume()
	r.waitFor(t, "every job", func() bool { return len(r.attempts) == 4 })
	for id, at := range r.attempts {
		if len(at) != 1 || r.jobs[id].Attempt != 1 {
			t.Errorf("job %s (%s) ran %d times, last as attempt %d", id, r.jobs[id].Payload, len(at), r.jobs[id].Attempt)
		}
	}
}

// TestJobsBeginInTheOrderReceived: a server that holds jobs ahead (prefetch) begins them in
// the order it received them. Runners that each waited for the one consumer's slot raced for
// it and reordered them; and the pause test above waited for "first" to be the only job run
// when "2" could begin before it.
func TestJobsBeginInTheOrderReceived(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d consumers", workers), func(t *testing.T) {
			d := NewMemory()
			p := New(Options{Name: "q", Driver: d, Prefetch: 4})
			var pushed []string
			for i := range 60 {
				if _, err := p.Push(context.Background(), fmt.Sprint(i), nil, 0); err != nil {
					t.Fatal(err)
				}
				pushed = append(pushed, fmt.Sprint(i))
			}
			var mu sync.Mutex
			var begun []string
			r := newRuns()
			consume(t, p, workers, func(_ context.Context, j *Job) error {
				mu.Lock()
				begun = append(begun, j.Payload)
				mu.Unlock()
				r.record(j)
				return nil
			})
			r.waitFor(t, "every job", func() bool { return len(r.attempts) == len(pushed) })
			mu.Lock()
			defer mu.Unlock()
			// With two consumers, two jobs begin at once and may record in either order: a job
			// may come at most one place early.
			for i, payload := range begun {
				var at int
				fmt.Sscan(payload, &at)
				if at > i+workers-1 {
					t.Fatalf("job %s began as the %dth of %d consumers: %v", payload, i, workers, begun)
				}
			}
		})
	}
}

// holderLeaseTimeout makes a lease of 2.1s for the tests where a server stalls past it.
const holderLeaseTimeout = 100 * time.Millisecond

// twoHolders pushes a job that a server receives (and begins, with begin) and then stalls on
// past its lease, and returns that server's delivery and the one of another server that
// received the job after the lease expired (its attempt is want).
func twoHolders(t *testing.T, mk driverMaker, begin bool, want int) (stalled, other Driver, mine, theirs *Delivery) {
	t.Helper()
	stalled, other = mk(t, holderLeaseTimeout), mk(t, holderLeaseTimeout)
	mine = pushReceived(t, stalled, begin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ts []*Delivery
	for len(ts) == 0 && ctx.Err() == nil { // once the lease expired
		var err error
		if ts, err = other.Receive(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(ts) != 1 || ts[0].Job.Attempt != want {
		t.Fatalf("the other server received %+v; want the job as its attempt %d", ts, want)
	}
	return stalled, other, mine, ts[0]
}

// pushReceived pushes a job through d and returns d's delivery of it, begun if begin.
func pushReceived(t *testing.T, d Driver, begin bool) *Delivery {
	t.Helper()
	if _, err := New(Options{Name: "q", Driver: d}).Push(context.Background(), "x", nil, 0); err != nil {
		t.Fatal(err)
	}
	ds, err := d.Receive(context.Background(), 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive = %v, %v", ds, err)
	}
	if begin {
		if err := d.Start(context.Background(), ds[0]); err != nil {
			t.Fatal(err)
		}
	}
	return ds[0]
}

// TestATakenOverJobIsSettledOnce: a server stalls while its job runs, another takes the job
// over and begins it too (the duplicate window the docs allow), and both attempts settle. The
// first settlement wins: the retry is published once, not once per server (which would run the
// job on two lines from then on), a dead letter is kept once, and a settlement after the first
// one changes nothing.
func TestATakenOverJobIsSettledOnce(t *testing.T) {
	type outcome struct {
		name  string
		first func(d Driver, x *Delivery) error // the settlement that reaches the broker first
		then  func(d Driver, x *Delivery) error
		want  Stats
	}
	retry := func(d Driver, x *Delivery) error { return d.Retry(context.Background(), x, x.Job.next("failed")) }
	bury := func(d Driver, x *Delivery) error { return d.Bury(context.Background(), x, true) }
	ack := func(d Driver, x *Delivery) error { return d.Ack(context.Background(), x) }
	outcomes := []outcome{
		{"both fail", retry, retry, Stats{Queued: 1}},
		{"both fail their last attempt", bury, bury, Stats{Dead: 1}},
		{"one succeeds, then the other fails", ack, retry, Stats{}},
		{"one fails, then the other succeeds", retry, ack, Stats{Queued: 1}},
		{"one buried, then the other retried", bury, retry, Stats{Dead: 1}},
	}
	for _, name := range []string{"redis", "nats"} {
		for _, o := range outcomes {
			t.Run(name+"/"+o.name, func(t *testing.T) {
				stalled, other, mine, theirs := twoHolders(t, drivers[name](t), true, 2)
				if err := other.Start(context.Background(), theirs); err != nil {
					t.Fatal(err)
				}
				_ = o.first(other, theirs)
				_ = o.then(stalled, mine) // the stalled server resumes and settles its run
				// The queue must settle to want and stay there (a second retry would be queued).
				got := waitStats(t, other, fmt.Sprint(o.want), func(s Stats) bool { return s == o.want })
				if s, err := other.Stats(context.Background()); err != nil || s != got {
					t.Errorf("stats went from %+v to %+v (%v)", got, s, err)
				}
			})
		}
	}
}

// TestATakenOverSettlementCountsNothing: the counters of a server that stalled past its lease
// and settles a job another server settled first do not count that settlement (they did).
func TestATakenOverSettlementCountsNothing(t *testing.T) {
	for _, name := range []string{"redis", "nats"} {
		t.Run(name, func(t *testing.T) {
			stalled, other, mine, theirs := twoHolders(t, drivers[name](t), true, 2)
			if err := other.Start(context.Background(), theirs); err != nil {
				t.Fatal(err)
			}
			if err := other.Ack(context.Background(), theirs); err != nil {
				t.Fatal(err)
			}
			p := New(Options{Name: "q", Driver: stalled, Retries: 5})
			p.settle(context.Background(), mine, nil)
			p.settle(context.Background(), mine, errors.New("failed on the stalled server"))
			last := *mine.Job
			last.Attempt = 6
			p.settle(context.Background(), &Delivery{Job: &last, ref: mine.ref}, errors.New("failed its last attempt"))
			if s := p.Status(context.Background(), name); s.Done != 0 || s.Retried != 0 || s.DeadLettered != 0 {
				t.Errorf("done %d, retried %d, dead-lettered %d; want none", s.Done, s.Retried, s.DeadLettered)
			}
		})
	}
}

// TestOfTwoHoldersOneBegins: a server stalls past its lease holding a job it had not begun,
// another receives the job, and both try to begin it, in either order: one only begins it, and
// its acknowledgement empties the queue (the job is not received a third time).
func TestOfTwoHoldersOneBegins(t *testing.T) {
	for _, name := range []string{"redis", "nats"} {
		for _, stalledFirst := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stalled_first=%v", name, stalledFirst), func(t *testing.T) {
				stalled, other, mine, theirs := twoHolders(t, drivers[name](t), false, 1)
				type holder struct {
					d Driver
					x *Delivery
				}
				order := []holder{{other, theirs}, {stalled, mine}}
				if stalledFirst {
					order[0], order[1] = order[1], order[0]
				}
				var began []holder
				for _, h := range order {
					err := h.d.Start(context.Background(), h.x)
					switch {
					case err == nil:
						began = append(began, h)
					case !errors.Is(err, ErrLeaseLost):
						t.Fatal(err)
					}
				}
				if len(began) != 1 {
					t.Fatalf("%d of the two holders began the job; want 1", len(began))
				}
				if err := began[0].d.Ack(context.Background(), began[0].x); err != nil {
					t.Fatal(err)
				}
				waitStats(t, other, "an empty queue", func(s Stats) bool { return s == Stats{} })
				// Past another lease, nobody receives it again.
				rctx, rcancel := context.WithTimeout(context.Background(), 2*(holderLeaseTimeout+ReclaimGrace))
				defer rcancel()
				for rctx.Err() == nil {
					if again, _ := other.Receive(rctx, 1); len(again) > 0 {
						t.Fatalf("the job was received again after its acknowledgement: %+v", again[0].Job)
					}
				}
			})
		}
	}
}

// TestAJobSettledElsewhereIsNeverBegun: a server stalls past its lease holding a job it had not
// begun; another receives, runs and acknowledges the job (its marker deleted); the stalled
// server, resumed, must not begin it.
func TestAJobSettledElsewhereIsNeverBegun(t *testing.T) {
	for _, name := range []string{"redis", "nats"} {
		t.Run(name, func(t *testing.T) {
			stalled, other, mine, theirs := twoHolders(t, drivers[name](t), false, 1)
			if err := other.Start(context.Background(), theirs); err != nil {
				t.Fatal(err)
			}
			if err := other.Ack(context.Background(), theirs); err != nil {
				t.Fatal(err)
			}
			waitStats(t, other, "an empty queue", func(s Stats) bool { return s == Stats{} })
			if err := stalled.Start(context.Background(), mine); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("Start of a job settled by another server = %v, want ErrLeaseLost", err)
			}
			if err := stalled.Retry(context.Background(), mine, mine.Job.next("x")); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("Retry of a job settled by another server = %v, want ErrLeaseLost", err)
			}
			waitStats(t, other, "an empty queue", func(s Stats) bool { return s == Stats{} })
		})
	}
}

// TestAPauseAndResumeWhileAJobWaitsForASlot: a Pause and a Resume that both land while a held
// job waits for the one consumer's slot leave it waiting. The wait used to end on the pause
// and, the pipeline resumed by then, admit the job without a slot: two jobs ran at once on one
// consumer, and the last runner blocked for good (Consume never returned).
func TestAPauseAndResumeWhileAJobWaitsForASlot(t *testing.T) {
	d := NewMemory()
	p := New(Options{Name: "q", Driver: d, Prefetch: 1})
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	var running, most atomic.Int32
	r := newRuns()
	cancel, consumed := consumeStoppable(p, 1, func(_ context.Context, j *Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		r.record(j)
		if j.Payload == "first" {
			<-release
		}
		return nil
	})
	for _, payload := range []string{"first", "second"} {
		if _, err := p.Push(context.Background(), payload, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, d, "first running, second held", func(s Stats) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return s.Running == 1 && len(d.running) == 2
	})
	// Back to back: the waiting dispatcher wakes on the pause and looks at the state once
	// the pipeline has resumed.
	p.Pause()
	p.Resume()
	unblock()
	r.waitFor(t, "both jobs", func() bool { return len(r.attempts) == 2 })
	cancel()
	select {
	case <-consumed:
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return 10s after its ctx ended")
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d jobs ran at once on one consumer", m)
	}
}

// consumeStoppable runs p.Consume with n consumers until the returned cancel; consumed is
// closed once Consume returned.
func consumeStoppable(p *Pipeline, n int, h Handler) (cancel func(), consumed <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Consume(ctx, n, h)
	}()
	return cancel, done
}

// failingAcks is a memory driver whose acknowledgements fail.
type failingAcks struct{ *Memory }

func (failingAcks) Ack(context.Context, *Delivery) error { return errors.New("the broker is down") }

// TestAFailedAcknowledgementCountsNoJobDone: a job whose acknowledgement failed runs again,
// and is not counted done (then again when it does).
func TestAFailedAcknowledgementCountsNoJobDone(t *testing.T) {
	p := New(Options{Name: "q", Driver: failingAcks{NewMemory()}})
	if _, err := p.Push(context.Background(), "x", nil, 0); err != nil {
		t.Fatal(err)
	}
	ds, err := p.opts.Driver.Receive(context.Background(), 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive = %v, %v", ds, err)
	}
	p.settle(context.Background(), ds[0], nil)
	if s := p.Status(context.Background(), "memory"); s.Done != 0 {
		t.Errorf("done = %d after an acknowledgement that failed", s.Done)
	}
}

// TestAJobNoConsumerTookIsNoAttempt: a handler that could not hand the job to a consumer
// (ErrNotBegun: none can boot) fails no attempt; the job goes back and runs later as attempt 1.
// It was a failed attempt, and a few seconds of consumers failing to boot dead-lettered jobs.
func TestAJobNoConsumerTookIsNoAttempt(t *testing.T) {
	d := NewMemory()
	p := New(Options{Name: "q", Driver: d, Retries: 0})
	var calls atomic.Int32
	r := newRuns()
	consume(t, p, 1, func(_ context.Context, j *Job) error {
		if calls.Add(1) <= 2 {
			return fmt.Errorf("consumer 0: %w", ErrNotBegun)
		}
		r.record(j)
		return nil
	})
	if _, err := p.Push(context.Background(), "x", nil, 0); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the job", func() bool { return len(r.attempts) == 1 })
	waitStats(t, d, "an empty queue", func(s Stats) bool { return s == Stats{} && p.done.Load() == 1 })
	for id, j := range r.jobs {
		if j.Attempt != 1 {
			t.Errorf("job %s ran as attempt %d", id, j.Attempt)
		}
	}
	if s := p.Status(context.Background(), "memory"); s.Failed != 0 || s.Retried != 0 || s.DeadLettered != 0 || s.Done != 1 {
		t.Errorf("failed %d, retried %d, dead %d, done %d; want 0, 0, 0, 1", s.Failed, s.Retried, s.DeadLettered, s.Done)
	}
}

// barrierReleases is a memory driver whose Release waits until n of them are under way at
// once (or 10 s passed, which it records).
type barrierReleases struct {
	*Memory
	n       int32
	arrived atomic.Int32
	all     chan struct{}
	late    atomic.Bool
}

func (b *barrierReleases) Release(ctx context.Context, d *Delivery) error {
	if b.arrived.Add(1) == b.n {
		close(b.all)
	}
	select {
	case <-b.all:
	case <-time.After(10 * time.Second):
		b.late.Store(true)
	}
	return b.Memory.Release(ctx, d)
}

// TestAStopGivesBackTheJobsHeldAtOnce: on stop, the jobs held and not begun go back to the
// broker at once, not one after the other: with a broker that answers slowly (frozen), one
// after the other made a stop last a broker timeout per job held (28 s against 13 s).
func TestAStopGivesBackTheJobsHeldAtOnce(t *testing.T) {
	b := &barrierReleases{Memory: NewMemory(), n: 3, all: make(chan struct{})}
	p := New(Options{Name: "q", Driver: b, Prefetch: 3})
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	r := newRuns()
	cancel, consumed := consumeStoppable(p, 1, func(_ context.Context, j *Job) error {
		r.record(j)
		<-release
		return nil
	})
	for i := range 4 {
		if _, err := p.Push(context.Background(), fmt.Sprint(i), nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, b, "one running, three held", func(s Stats) bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return s.Running == 1 && len(b.running) == 4
	})
	cancel()
	select {
	case <-b.all:
	case <-time.After(15 * time.Second):
	}
	unblock()
	<-consumed
	if b.late.Load() {
		t.Error("the jobs held were given back one after the other")
	}
	if s, _ := b.Stats(context.Background()); s.Queued != 3 {
		t.Errorf("after the stop: %+v, want the three jobs held queued", s)
	}
}

// buryAll pushes one job per payload to p, each failing its only attempt, and waits until all
// lie in the dead letters; it returns their ids, oldest first.
func buryAll(t *testing.T, p *Pipeline, payloads []string) []string {
	t.Helper()
	var ids []string
	for _, payload := range payloads {
		id, err := p.Push(context.Background(), payload, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	consume(t, p, 1, func(context.Context, *Job) error { return errors.New("no") })
	waitStats(t, p.opts.Driver, "every job dead", func(s Stats) bool { return s == Stats{Dead: int64(len(ids))} })
	return ids
}

// TestDeadLettersReadOnlyWhatTheyReturn: showing one dead letter reads the others only as far
// as their ids (before, every dead letter was read and decoded: 300 of 1 MiB on Redis took
// 7.8 s and 598 MiB of heap to show the first), and a listing holds only the cut payloads.
func TestDeadLettersReadOnlyWhatTheyReturn(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string, mk driverMaker) {
		// Short of 1 MiB: nats-server refuses a message over 1 MiB by default (max_payload), and
		// the job's JSON adds its other fields to the payload.
		const n, size = 40, MaxPayload - 4<<10
		big := `"` + strings.Repeat("x", size-2) + `"`
		payloads := make([]string, n)
		for i := range payloads {
			payloads[i] = big
		}
		payloads[n-1] = `"the last"`
		p := New(Options{Name: "q", Driver: mk(t, 10*time.Second), DeadLetter: true})
		ids := buryAll(t, p, payloads)
		if j, err := p.DeadLetter(context.Background(), ids[n-1]); err != nil || j.Payload != `"the last"` || j.Error != "no" {
			t.Fatalf("the last dead letter = %+v, %v", j, err)
		}
		if _, err := p.DeadLetter(context.Background(), newID()); !errors.Is(err, ErrNoSuchJob) {
			t.Fatalf("a dead letter that is not = %v, want ErrNoSuchJob", err)
		}
		allocated := func() uint64 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.TotalAlloc
		}
		before := allocated()
		j, err := p.DeadLetter(context.Background(), ids[0])
		read := allocated() - before
		if err != nil || j.ID != ids[0] || j.Payload != big {
			t.Fatalf("the first dead letter: %v", err)
		}
		// Reading them all allocates at least each payload twice (as read, as decoded).
		if read > n*size/2 {
			t.Errorf("showing the first of %d dead letters of 1 MiB allocated %d MiB", n, read>>20)
		}
		t.Logf("showing the first of %d dead letters of 1 MiB allocated %d MiB", n, read>>20)

		// A listing holds the payloads cut, not whole ones (nor whole ones behind the cut).
		heap := func() uint64 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		before = heap()
		list, err := p.DeadLetters(context.Background(), n, 1024)
		held := int64(heap()) - int64(before)
		if err != nil || len(list) != n || len(list[0].Payload) != 1024+3 {
			t.Fatalf("DeadLetters = %d letters, %v", len(list), err)
		}
		if held > n*size/4 {
			t.Errorf("a listing of %d dead letters of 1 MiB cut to 1 KiB holds %d MiB", n, held>>20)
		}
		runtime.KeepAlive(list)
	})
}

// TestDeadLettersListedCut: a listing cuts payloads as it reads them, on a whole UTF-8
// character, and leaves short ones whole.
func TestDeadLettersListedCut(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string, mk driverMaker) {
		p := New(Options{Name: "q", Driver: mk(t, 10*time.Second), DeadLetter: true})
		long := `"` + strings.Repeat("é", 600) + `"` // 1,202 bytes
		buryAll(t, p, []string{long, `"short"`, `"third"`})
		list, err := p.DeadLetters(context.Background(), 2, 1024)
		if err != nil || len(list) != 2 {
			t.Fatalf("DeadLetters = %v, %v", list, err)
		}
		if want := `"` + strings.Repeat("é", 511) + "..."; list[0].Payload != want {
			t.Errorf("a long payload listed as %d bytes %q...; want it cut to %d bytes", len(list[0].Payload), list[0].Payload[:10], len(want))
		}
		if list[1].Payload != `"short"` {
			t.Errorf("a short payload listed as %q", list[1].Payload)
		}
		if whole, err := p.DeadLetters(context.Background(), 10, 0); err != nil || len(whole) != 3 || whole[0].Payload != long {
			t.Errorf("DeadLetters without a cut = %d letters, %v", len(whole), err)
		}
	})
}

// TestEveryDeadLetterListedIsFound: findDead, which reads ids from the start of the JSON encode
// writes, finds each dead letter by the id a listing shows, whatever its layout: another key
// first, an escape in the id, or no JSON at all (listed under its fallback id).
func TestEveryDeadLetterListedIsFound(t *testing.T) {
	entries := []deadEntry{
		{raw: string((&Job{ID: "4f0c", Payload: `"x"`, Attempt: 2}).encode())},
		{raw: `{"payload":"{\"id\":\"5a1d\"}","id":"6b2e"}`},
		{raw: `{"id":"7c\u0033f","payload":"x"}`},
		{raw: `{"id":"8d4a"`, fallback: "1700000000000-0"},
		{raw: `not JSON`, fallback: "1700000000000-1"},
	}
	walk := func(_ context.Context, f func(at int, e deadEntry) bool) error {
		for i, e := range entries {
			if !f(i, e) {
				return nil
			}
		}
		return nil
	}
	want := []string{"4f0c", "6b2e", "7c3f", "1700000000000-0", "1700000000000-1"}
	list, err := listDead(context.Background(), walk, 10, 0)
	if err != nil || len(list) != len(entries) {
		t.Fatalf("listDead = %d, %v", len(list), err)
	}
	for i, j := range list {
		if j.ID != want[i] {
			t.Errorf("entry %d listed as %q, want %q", i, j.ID, want[i])
		}
		if at, found, err := findDead(context.Background(), walk, j.ID); err != nil || at != i || found.ID != j.ID {
			t.Errorf("findDead(%q) = %d, %v; want entry %d", j.ID, at, err, i)
		}
	}
	for _, id := range []string{"5a1d", "8d4a", "nope"} {
		if _, _, err := findDead(context.Background(), walk, id); !errors.Is(err, ErrNoSuchJob) {
			t.Errorf("findDead(%q) = %v, want ErrNoSuchJob", id, err)
		}
	}
}

// TestNATSRefusesAJobOverItsServersMaxPayload: a payload within MaxPayload whose job, as stored,
// exceeds the NATS server's max_payload (1 MiB by default) is refused as ErrTooLarge, saying so,
// not with the client's bare "maximum payload exceeded".
func TestNATSRefusesAJobOverItsServersMaxPayload(t *testing.T) {
	p := New(Options{Name: "q", Driver: drivers["nats"](t)(t, time.Second)})
	_, err := p.Push(context.Background(), strings.Repeat("x", MaxPayload), nil, 0)
	if err != nil && (!errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "max_payload")) {
		t.Fatalf("err = %v, want ErrTooLarge naming max_payload", err)
	}
}
