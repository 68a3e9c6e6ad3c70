package jobs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"
)

// ownServer starts a broker server of the test's own (argv, given the port and a directory
// kept across restarts) on a free port of 127.0.0.1. It returns its address and outage, which
// kills it (SIGKILL), leaves it down for down and starts it again on the same port and
// directory. The test skips if argv[0] is not installed.
func ownServer(t *testing.T, argv func(port, dir string) []string) (addr string, outage func(down time.Duration)) {
	t.Helper()
	name := argv("0", "")[0]
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed", name)
	}
	port := lowPort(t)
	addr = net.JoinHostPort("127.0.0.1", port)
	dir := t.TempDir()
	var srv *exec.Cmd
	start := func() {
		t.Helper()
		args := argv(port, dir)
		srv = exec.Command(args[0], args[1:]...)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				_ = c.Close()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s on %s did not come up: %v", name, addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	kill := func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	}
	start()
	t.Cleanup(kill)
	return addr, func(down time.Duration) {
		t.Helper()
		kill()
		time.Sleep(down)
		start()
	}
}

// lowPort returns a loopback port free now, from below the kernel's ephemeral range (32768
// up): the outage leaves the port unbound for seconds, and a port from that range could be
// another test's listener on port 0 by the time the broker binds it again. Each test binary
// starts at its own offset (integration's ports start at 20000).
func lowPort(t *testing.T) string {
	t.Helper()
	for {
		p := nextLowPort.Add(1)
		if p >= 20000 {
			t.Fatal("no port left below 20000")
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // taken: the next one
		}
		_ = l.Close()
		return fmt.Sprint(p)
	}
}

var nextLowPort = func() *atomic.Int32 {
	var p atomic.Int32
	p.Store(int32(10000 + os.Getpid()%900*10))
	return &p
}()

// ownRedis is a redis-server of the test's own which writes every change to its append-only
// file before answering, so that a restart keeps the streams and their pending entries (with
// the time each was last delivered).
func ownRedis(t *testing.T) (addr string, outage func(down time.Duration)) {
	t.Helper()
	return ownServer(t, func(port, dir string) []string {
		return []string{"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "yes", "--appendfsync", "always", "--dir", dir}
	})
}

// ownNATS is a nats-server of the test's own with JetStream storing its streams (and their
// consumers' pending messages) in a directory of its own, so that a restart keeps them.
func ownNATS(t *testing.T) (url string, outage func(down time.Duration)) {
	t.Helper()
	addr, outage := ownServer(t, func(port, dir string) []string {
		return []string{"nats-server", "-a", "127.0.0.1", "-p", port, "-js", "-sd", dir}
	})
	return "nats://" + addr, outage
}

// TestABrokerOutageRunsNoJobTwice: the broker is killed and restarted (its data kept) while a
// job runs, and stays down longer than the lease: no server's renewal reached it, so every job
// held looks expired when it is back. Neither the job's own server nor another living server on
// the broker takes it over: they wait a lease after the outage, by when its server has renewed
// it, and the job, with retries: 0, is done once. The lease is 4.1s, as in
// TestHeldJobsKeepTheirLease: once the broker is back, the job's server has a lease less a
// renewal (about 3s) to reconnect and renew the job before the other server, should it have
// reconnected first, takes it; a lease of 2.1s left 1.6s less nats.go's reconnection jitter,
// too little on a loaded machine.
func TestABrokerOutageRunsNoJobTwice(t *testing.T) {
	const timeout = 2100 * time.Millisecond // a lease of 4.1s
	brokers := []struct {
		name string
		own  func(t *testing.T) (addr string, outage func(down time.Duration))
		dial func(addr string) (Driver, error)
	}{
		{"redis", ownRedis, func(addr string) (Driver, error) {
			return NewRedis(context.Background(), RedisOptions{Address: addr, Stream: "peregrine-test-jobs:outage", Timeout: timeout})
		}},
		{"nats", ownNATS, func(url string) (Driver, error) {
			return NewNATS(context.Background(), NATSOptions{URL: url, Stream: "PEREGRINE_TEST_OUTAGE", Timeout: timeout})
		}},
	}
	for _, br := range brokers {
		t.Run(br.name, func(t *testing.T) {
			addr, outage := br.own(t)
			lease := timeout + ReclaimGrace
			pipeline := func() *Pipeline {
				d, err := br.dial(addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = d.Close() })
				return New(Options{Name: "q", Driver: d, Timeout: timeout, Retries: 0, DeadLetter: true})
			}
			a, b := pipeline(), pipeline()
			r := newRuns()
			release := make(chan struct{})
			var onB atomic.Int32
			consume(t, a, 2, func(_ context.Context, j *Job) error {
				r.record(j)
				<-release
				return nil
			})
			unblock := func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}
			t.Cleanup(unblock) // before consume's cleanup waits for the job, should the test fail
			id, err := a.Push(context.Background(), "x", nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			r.waitFor(t, "the job begun on A", func() bool { return len(r.attempts[id]) == 1 })
			consume(t, b, 2, func(_ context.Context, j *Job) error { onB.Add(1); r.record(j); return nil })

			outage(lease + time.Second)
			// Within two leases of its return, a server that took the job over would have begun
			// or buried it. Before the fix, as its last attempt, it was buried and A's
			// acknowledgement was lost: Redis, in 3 runs of 4; NATS, in 5 runs of 8. With NATS
			// it also came back as new (NumDelivered 1: nats-server, killed, had lost its record
			// of the delivery), and ran again on A or B (2 runs of 68 that took only the jobs
			// delivered again for another server's).
			time.Sleep(2 * lease)
			unblock()
			// The broker shows the job settled before its server counts it: wait for both.
			settled := func() bool { return a.done.Load()+b.done.Load()+a.dead.Load()+b.dead.Load() > 0 }
			st := waitStats(t, a.opts.Driver, "the job settled", func(s Stats) bool { return s.Queued == 0 && s.Running == 0 && settled() })
			if st != (Stats{}) {
				t.Errorf("stats %+v; want an empty queue", st)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if n := len(r.attempts[id]); n != 1 || onB.Load() != 0 {
				t.Errorf("the job began %d times, %d of them on B; want once, on A", n, onB.Load())
			}
			if done, dead := a.done.Load()+b.done.Load(), a.dead.Load()+b.dead.Load(); done != 1 || dead != 0 {
				t.Errorf("done %d, dead-lettered %d; want done once", done, dead)
			}
			if _, err := a.DeadLetter(context.Background(), id); !errors.Is(err, ErrNoSuchJob) {
				t.Errorf("the job is in the dead letters: %v", err)
			}
		})
	}
}
