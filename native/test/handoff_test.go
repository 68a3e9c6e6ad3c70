package nativetest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/websocket"
)

// WebSocket handoff (native/handoff.c), tested on the binary alone: the test is the daemon,
// receiving with internal/websocket's Handoff.

// upgradeHead is a WebSocket upgrade's head with extra header bytes of padding.
func upgradeHead(padding int) string {
	return "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n" +
		"X-Pad: " + strings.Repeat("p", padding) + "\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
}

// fdsOf is the number of fds process pid has open.
func fdsOf(t *testing.T, pid int) int {
	t.Helper()
	e, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(e)
}

// TestHandoffToServer: an upgrade (whatever its size, past the unix socket's buffer too, and
// with bytes after its head) reaches the daemon whole with the client's socket, on which the
// daemon answers; the worker keeps no copy (its fds come back to where they were) and serves
// its other connections; a request that only looks like an upgrade is PHP's.
func TestHandoffToServer(t *testing.T) {
	h, err := websocket.ListenHandoff(t.TempDir(), 4<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	l := listenDirect(t)
	p := startDirect(t, l, "max_head=1048576,max_line=1048576", websocket.HandoffEnv+"="+h.Path())
	before := fdsOf(t, p.cmd.Process.Pid)
	for _, size := range []int{0, 4000, 16 << 10, 300 << 10, 900 << 10} {
		for _, after := range []string{"", "early frame bytes"} {
			c := dial(t, l.addr)
			raw := upgradeHead(size) + after
			if _, err := io.WriteString(c, raw); err != nil {
				t.Fatal(err)
			}
			hc, err := h.Accept()
			if err != nil {
				t.Fatal(err)
			}
			_ = hc.SetDeadline(time.Now().Add(readTimeout))
			got := make([]byte, len(raw))
			if _, err := io.ReadFull(hc, got); err != nil || string(got) != raw {
				t.Fatalf("size %d: the daemon read %d bytes (%v), want the %d sent", size, len(got), err, len(raw))
			}
			_, _ = io.WriteString(hc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nfrom the daemon")
			_ = hc.Close()
			rest, err := io.ReadAll(c)
			if err != nil || !strings.HasSuffix(string(rest), "from the daemon") || !strings.HasPrefix(string(rest), "HTTP/1.1 101") {
				t.Fatalf("size %d: the client read %q, %v", size, rest, err)
			}
		}
	}
	// A request pipelined before the upgrade is answered first: its answer, held to go out with
	// the next one's, is written before the connection is handed over.
	c := dial(t, l.addr)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"+upgradeHead(0)); err != nil {
		t.Fatal(err)
	}
	hc, err := h.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = hc.SetDeadline(time.Now().Add(readTimeout))
	got := make([]byte, len(upgradeHead(0)))
	if _, err := io.ReadFull(hc, got); err != nil || string(got) != upgradeHead(0) {
		t.Fatalf("after a pipelined request: the daemon read %q (%v), want the upgrade", got, err)
	}
	_, _ = io.WriteString(hc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	_ = hc.Close()
	br := bufio.NewReader(c)
	for _, want := range []int{http.StatusOK, http.StatusSwitchingProtocols} {
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("after a pipelined request: %v", err)
		}
		body(t, r) // read before the next answer
		if r.StatusCode != want {
			t.Fatalf("after a pipelined request: status %d, want %d (the request's answer, then the upgrade's)", r.StatusCode, want)
		}
	}

	// Connection: upgrade without Upgrade: websocket is an ordinary request.
	c = dial(t, l.addr)
	rs := exchange(t, c, bufio.NewReader(c), "GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n", 1, "GET")
	if body(t, rs[0]) != "hello" {
		t.Errorf("Upgrade: h2c: %d %q", rs[0].StatusCode, body(t, rs[0]))
	}
	waitFor(t, func() bool { return fdsOf(t, p.cmd.Process.Pid) <= before+1 }) // +1: c
}

// TestHandoffServerGone: when the daemon cannot take the connection (no socket there, or one
// that takes the message and dies unread) the client gets a 503 or a close, never a hang, and
// the worker keeps no copy and serves on.
func TestHandoffServerGone(t *testing.T) {
	dir := t.TempDir()
	gone := filepath.Join(dir, "gone.sock")
	l := listenDirect(t)
	p := startDirect(t, l, "", websocket.HandoffEnv+"="+gone)
	before := fdsOf(t, p.cmd.Process.Pid)

	// No daemon: 503 and close, after a good request on the same connection.
	c := dial(t, l.addr)
	br := bufio.NewReader(c)
	rs := exchange(t, c, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"+upgradeHead(10), 2, "GET")
	if body(t, rs[0]) != "hello" || rs[1].StatusCode != http.StatusServiceUnavailable || !rs[1].Close {
		t.Errorf("no daemon: %d (close %v), want 503 and close", rs[1].StatusCode, rs[1].Close)
	}
	expectClosed(t, c, br)

	// A daemon that takes the message and dies without reading it: the socket in flight dies
	// with it, and the client sees its connection end.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: gone, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c = dial(t, l.addr)
	if _, err := io.WriteString(c, upgradeHead(10)); err != nil {
		t.Fatal(err)
	}
	uc, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	_ = uc.Close()
	_ = ln.Close()
	rest, err := io.ReadAll(c)
	if err != nil || (len(rest) > 0 && !strings.HasPrefix(string(rest), "HTTP/1.1 503")) {
		t.Errorf("a daemon that died with the message: the client read %q, %v; want a 503 or a close", rest, err)
	}
	c = dial(t, l.addr)
	rs = exchange(t, c, bufio.NewReader(c), "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 1, "GET")
	if body(t, rs[0]) != "hello" {
		t.Errorf("the worker after the failed handoffs: %q", body(t, rs[0]))
	}
	waitFor(t, func() bool { return fdsOf(t, p.cmd.Process.Pid) <= before+1 })
}
