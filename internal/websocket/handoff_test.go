package websocket

import (
	"encoding/binary"
	"io"
	"net"
	"os"
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
