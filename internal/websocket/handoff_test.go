package websocket

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pipeFds returns the two ends of a socket pair: a stand-in for a client's connection.
func pipeFds(t *testing.T) (int, int) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fds[0], fds[1]
}

// isOpen reports whether the peer of fd still has its end open: a read sees EOF once every
// copy of the other end is closed.
func peerClosed(t *testing.T, fd int) bool {
	t.Helper()
	tv := syscall.Timeval{Sec: 5}
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	b := make([]byte, 1)
	n, err := syscall.Read(fd, b)
	return n == 0 && err == nil
}

// TestHandoffReceive: a whole message gives a connection that replays the worker's bytes
// first, then the client's; a message cut short (its worker died mid-send), too long, or with
// no socket or two, gives nothing, and every socket it carried is closed: the client's end
// sees EOF once the worker's copy is gone too.
func TestHandoffReceive(t *testing.T) {
	h, err := ListenHandoff(t.TempDir(), 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	send := func(fds []int, length int, data []byte) {
		t.Helper()
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: h.Path(), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		msg := binary.BigEndian.AppendUint32(nil, uint32(length))
		msg = append(msg, data...)
		var oob []byte
		if len(fds) > 0 {
			oob = syscall.UnixRights(fds...)
		}
		if _, _, err := c.WriteMsgUnix(msg, oob, nil); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}

	worker, client := pipeFds(t)
	send([]int{worker}, 5, []byte("GET /"))
	_ = syscall.Close(worker) // the worker forgets it
	c, err := h.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Write(client, []byte(" HTTP/1.1")); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Shutdown(client, syscall.SHUT_WR)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(c); string(got) != "GET / HTTP/1.1" || err != nil {
		t.Errorf("the handed connection read %q, %v", got, err)
	}
	_ = c.Close()
	if !peerClosed(t, client) {
		t.Error("the client's end is open after the server closed its copy")
	}
	_ = syscall.Close(client)

	for _, tc := range []struct {
		name   string
		nfds   int
		length int
		data   string
	}{
		{"cut short", 1, 10, "GET"},
		{"no length", 1, -1, ""},
		{"too long", 1, 65, "GET"},
		{"two sockets", 2, 3, "GET"},
		{"no socket", 0, 3, "GET"},
	} {
		var workers, clients []int
		for range max(tc.nfds, 1) {
			w, c := pipeFds(t)
			workers, clients = append(workers, w), append(clients, c)
		}
		fds := workers[:tc.nfds]
		if tc.length < 0 {
			c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: h.Path(), Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			_, _, _ = c.WriteMsgUnix([]byte{0}, syscall.UnixRights(fds...), nil)
			_ = c.Close()
		} else {
			send(fds, tc.length, []byte(tc.data))
		}
		for _, w := range workers {
			_ = syscall.Close(w)
		}
		for i, c := range clients {
			if !peerClosed(t, c) {
				t.Errorf("%s: socket %d still open somewhere", tc.name, i)
			}
			_ = syscall.Close(c)
		}
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := h.Accept(); err == nil {
			accepted <- c
		}
	}()
	_ = h.Close()
	select {
	case c := <-accepted:
		t.Errorf("a refused message gave a connection: %v", c.RemoteAddr())
	default:
	}
	if _, err := os.Stat(h.Path()); !os.IsNotExist(err) {
		t.Errorf("the socket's path is left after Close: %v", err)
	}
}

// logLines is a slog handler that sends each record's message to a channel.
type logLines chan string

func (l logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l logLines) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Message:
	default:
	}
	return nil
}
func (l logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logLines) WithGroup(string) slog.Handler      { return l }

// TestHandoffAcceptFailureIsRetried: an accept that fails for a moment (out of descriptors
// here) does not end the handoff's loop: a worker's next handoff is taken. Before, the loop
// returned on any error while the socket stayed open: workers went on handing sockets over
// that nobody accepted, their clients hanging.
func TestHandoffAcceptFailureIsRetried(t *testing.T) {
	logs := make(logLines, 16)
	h, err := ListenHandoff(t.TempDir(), 64, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := limit
	low.Cur = uint64(len(open)) // ReadDir's own descriptor is closed: room for the dial's only
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower the descriptor limit: %v", err)
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: h.Path(), Net: "unix"})
	if err != nil {
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit)
		t.Fatal(err)
	}
	var failed bool
	for deadline := time.After(10 * time.Second); !failed; {
		select {
		case m := <-logs:
			failed = strings.Contains(m, "accepting a WebSocket handoff failed")
		case <-deadline:
			_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit)
			t.Fatal("the accept under the low limit did not fail")
		}
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()

	worker, client := pipeFds(t)
	defer syscall.Close(client)
	w, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: h.Path(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.WriteMsgUnix(append(binary.BigEndian.AppendUint32(nil, 2), "hi"...), syscall.UnixRights(worker), nil); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	_ = syscall.Close(worker)
	got := make(chan net.Conn, 1)
	go func() {
		if a, err := h.Accept(); err == nil {
			got <- a
		}
	}()
	select {
	case a := <-got:
		_ = a.Close()
	case <-time.After(10 * time.Second):
		t.Error("a handoff after one failed accept was never taken")
	}
}

// TestHandoffCloseCutsAStalledSender: Close does not wait out the handoff timeout of a worker
// that connected and stalled before its message.
func TestHandoffCloseCutsAStalledSender(t *testing.T) {
	logs := make(logLines, 16)
	h, err := ListenHandoff(t.TempDir(), 64, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: h.Path(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for deadline := time.After(10 * time.Second); ; { // its receive has begun
		h.mu.Lock()
		n := len(h.receiving)
		h.mu.Unlock()
		if n == 1 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("the stalled sender was never accepted")
		case <-time.After(time.Millisecond):
		}
	}
	closed := make(chan struct{})
	go func() { _ = h.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(handoffTimeout - time.Second):
		t.Fatal("Close waited for the stalled sender's timeout")
	}
}
