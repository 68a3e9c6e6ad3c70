package websocket

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// freePort returns a port of 127.0.0.1 that nothing listened on a moment ago: each test's
// broker server has its own, as other runs of these tests on the machine do.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer runs a broker server (redis-server, nats-server) for the test on port, and
// returns its address once that server itself listens there (not another process that took
// the port: the test would talk to it), and what stops it (at the latest when the test ends);
// the test skips without it.
func startServer(t testing.TB, port int, name string, args ...string) (string, func()) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("no %s: %v", name, err)
	}
	var out strings.Builder
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	stop := func() { once.Do(func() { _ = cmd.Process.Kill(); <-exited }) }
	t.Cleanup(stop)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for !listening(t, cmd.Process.Pid, port) {
		select {
		case <-exited:
			t.Fatalf("%s on %s exited: %v\n%s", name, addr, cmd.ProcessState, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s", name, addr)
		}
	}
	return addr, stop
}

// listening reports whether process pid holds a socket listening on TCP port: one of its file
// descriptors is the socket that /proc/net/tcp lists for the port in state LISTEN (0A).
func listening(t testing.TB, pid, port int) bool {
	t.Helper()
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	sockets := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		if f := strings.Fields(line); len(f) > 9 && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", port)) && f[3] == "0A" {
			sockets["socket:["+f[9]+"]"] = true
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && sockets[link] {
			return true
		}
	}
	return false
}

func startRedisServer(t testing.TB) string {
	t.Helper()
	port := freePort(t)
	addr, _ := startServer(t, port, "redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	return addr
}

func startNatsServer(t *testing.T, port int, dir string) (string, func()) {
	t.Helper()
	return startServer(t, port, "nats-server", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir)
}

func dialBroker(t testing.TB, url string) Broker {
	t.Helper()
	b, err := Dial(t.Context(), url, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// heard subscribes to b and returns what it hears.
func heard(t *testing.T, b Broker) <-chan Message {
	t.Helper()
	got := make(chan Message, 64)
	if err := b.Subscribe(t.Context(), "n", func(m *Message) { c := *m; c.Data = append([]byte(nil), m.Data...); got <- c }); err != nil {
		t.Fatal(err)
	}
	return got
}

func next(t *testing.T, got <-chan Message) Message {
	t.Helper()
	select {
	case m := <-got:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("the broker delivered nothing")
	}
	return Message{}
}

// A stream on several channels resumes after one id: the ids of all channels are one order,
// so that what one channel had after the last id seen on another is replayed. With each
// stream's own ids, B's publish in the same millisecond as A's second sorts before it.
func TestRedisResumeAcrossChannels(t *testing.T) {
	b := dialBroker(t, "redis://"+startRedisServer(t))
	got := heard(t, b)
	ctx := t.Context()
	lost := 0
	for range 50 {
		for _, ch := range []string{"a", "a", "b"} {
			if err := b.Publish(ctx, "", &Message{Op: MsgPublish, Target: ch, Data: []byte(ch)}); err != nil {
				t.Fatal(err)
			}
		}
		ms := []Message{next(t, got), next(t, got), next(t, got)}
		if !lessID(ms[0].EventID, ms[1].EventID) || !lessID(ms[1].EventID, ms[2].EventID) {
			t.Fatalf("ids out of publish order: %s %s %s", ms[0].EventID, ms[1].EventID, ms[2].EventID)
		}
		kept, err := b.(History).Since(ctx, []string{"a", "b"}, ms[1].EventID)
		if err != nil {
			t.Fatal(err)
		}
		if len(kept) != 1 || kept[0].Channel != "b" || kept[0].EventID != ms[2].EventID {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("a resume after a's last event missed b's in %d of 50 rounds", lost)
	}
}

// restartNats stops the NATS server b is connected to and starts it again, and returns once
// b reconnected.
func restartNats(t *testing.T, b Broker, stop func(), port int, dir string) {
	t.Helper()
	stop()
	startNatsServer(t, port, dir)
	nc := b.(*natsBroker).nc
	for deadline := time.Now().Add(15 * time.Second); !nc.IsConnected(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("nats.go did not reconnect")
		}
	}
}

// A NATS server that restarts has lost the history stream (memory storage): the next publish
// makes it again rather than failing until the daemon restarts. Its sequence numbers restart.
func TestNatsPublishAfterRestart(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	addr, stop := startNatsServer(t, port, dir)
	b := dialBroker(t, "nats://"+addr)
	got := heard(t, b)
	ctx := t.Context()
	if err := b.Publish(ctx, "", &Message{Op: MsgPublish, Target: "room", Data: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	next(t, got)
	restartNats(t, b, stop, port, dir)
	if err := b.Publish(ctx, "", &Message{Op: MsgPublish, Target: "room", Data: []byte("after")}); err != nil {
		t.Fatalf("a publish after the NATS server restarted: %v", err)
	}
	if m := next(t, got); string(m.Data) != "after" || !strings.HasSuffix(m.EventID, "-1") {
		t.Fatalf("heard %q (id %s), want \"after\" (id EPOCH-1: the new stream's first)", m.Data, m.EventID)
	}
	kept, err := b.(History).Since(ctx, []string{"room"}, "0")
	if err != nil || len(kept) != 1 || string(kept[0].Data) != "after" {
		t.Fatalf("Since after the restart: %v, %v", kept, err)
	}
}

// A resume with an id from before the NATS server restarted replays what the new stream has:
// its sequences start again at 1, and an id of the sequence alone skipped that many of them.
// Two servers: B's ids take the new stream's epoch though A made the stream again; a resume
// on either, after any id from before, misses none of the new publishes.
func TestNatsResumeAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	addr, stop := startNatsServer(t, port, dir)
	a, b := dialBroker(t, "nats://"+addr), dialBroker(t, "nats://"+addr)
	gotA, gotB := heard(t, a), heard(t, b)
	ctx := t.Context()
	publish := func(on Broker, data string) Message {
		t.Helper()
		if err := on.Publish(ctx, "", &Message{Op: MsgPublish, Target: "room", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
		next(t, gotA)
		return next(t, gotB)
	}
	var before Message
	for i := range 5 {
		before = publish(b, "before "+strconv.Itoa(i))
	}
	restartNats(t, a, stop, port, dir)
	for deadline := time.Now().Add(15 * time.Second); !b.(*natsBroker).nc.IsConnected(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("nats.go did not reconnect")
		}
	}
	first := publish(a, "after 0")
	second := publish(b, "after 1")
	if epoch := func(id string) string { e, _, _ := strings.Cut(id, "-"); return e }; epoch(second.EventID) != epoch(first.EventID) || epoch(first.EventID) == epoch(before.EventID) {
		t.Fatalf("ids before %s, after on A %s, after on B %s: want the two after of one new epoch", before.EventID, first.EventID, second.EventID)
	}
	for _, on := range []Broker{a, b} {
		kept, err := on.(History).Since(ctx, []string{"room"}, before.EventID)
		if err != nil {
			t.Fatal(err)
		}
		if len(kept) != 2 || string(kept[0].Data) != "after 0" || string(kept[1].Data) != "after 1" || kept[1].EventID != second.EventID {
			t.Fatalf("resume after %s (before the restart): %d kept %v; want the 2 published since", before.EventID, len(kept), kept)
		}
	}
}

// A resume after the NATS server restarted makes the stream again too (no publish since).
func TestNatsSinceAfterRestart(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	addr, stop := startNatsServer(t, port, dir)
	b := dialBroker(t, "nats://"+addr)
	restartNats(t, b, stop, port, dir)
	if kept, err := b.(History).Since(t.Context(), []string{"room"}, "0"); err != nil || len(kept) != 0 {
		t.Fatalf("Since after the restart: %v, %v", kept, err)
	}
}

// A resume's consumer serves one fetch: the server drops it soon after, not in 5 minutes.
func TestNatsResumeConsumerIdle(t *testing.T) {
	addr, _ := startNatsServer(t, freePort(t), t.TempDir())
	b := dialBroker(t, "nats://"+addr)
	ctx := t.Context()
	for range 3 {
		if err := b.Publish(ctx, "", &Message{Op: MsgPublish, Target: "room", Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		if kept, err := b.(History).Since(ctx, []string{"room"}, "1"); err != nil || len(kept) != 2 {
			t.Fatalf("Since: %v, %v", kept, err)
		}
	}
	s, err := b.(*natsBroker).js.Stream(ctx, natsStream)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ci := range s.ListConsumers(ctx).Info() {
		n++
		if ci.Config.InactiveThreshold > consumerIdle {
			t.Errorf("consumer %s stays %v idle", ci.Name, ci.Config.InactiveThreshold)
		}
	}
	if n == 0 {
		t.Fatal("no consumer listed: the test checks nothing")
	}
}

// BenchmarkRedisPublish publishes to a channel with history, as PHP's publish does: a round
// trip to Redis and the script that keeps and publishes it.
func BenchmarkRedisPublish(b *testing.B) {
	br := dialBroker(b, "redis://"+startRedisServer(b))
	m := &Message{Op: MsgPublish, Target: "room", Data: []byte("a message of some length")}
	for b.Loop() {
		if err := br.Publish(b.Context(), "", m); err != nil {
			b.Fatal(err)
		}
	}
}
