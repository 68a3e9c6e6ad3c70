package httpserver

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestLimitListenerCapsOpenConnections(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := limitListener(raw, 2)
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	first, second := <-accepted, <-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted at a cap of 2")
	case <-time.After(100 * time.Millisecond):
		// Not a timing assertion on the server: only that nothing came while at the cap.
	}
	_ = first.Close()
	_ = first.Close() // a second Close must not free a second slot
	select {
	case c := <-accepted:
		_ = c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("closing a connection did not let the third one in")
	}
	_ = second.Close()
}

func TestLimitListenerCloseUnblocksAccept(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := limitListener(raw, 1)
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	held, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Close() })
	done := make(chan error, 1)
	go func() { _, err := ln.Accept(); done <- err }()
	_ = ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept stayed blocked at the cap after Close")
	}
}

func TestMaxConnections(t *testing.T) {
	if got := MaxConnections(500, 4); got != 500 {
		t.Errorf("configured 500: got %d", got)
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	got := MaxConnections(0, 4)
	if got < 16 || got > DefaultMaxConnections || int64(got) > max(16, int64(rl.Cur)-int64(fdReserve(4))) {
		t.Errorf("MaxConnections(0, 4) = %d with RLIMIT_NOFILE %d", got, rl.Cur)
	}
}

// TestCapConnGivesTheSocket: a capped connection still offers its socket (syscall.Conn), which
// http1 sets TCP_CORK on around a file; one without a socket says so.
func TestCapConnGivesTheSocket(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := limitListener(raw, 1)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		if c, err := net.Dial("tcp", raw.Addr().String()); err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatalf("%T is not a syscall.Conn", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cerr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, 1)
	}); err != nil || cerr != nil {
		t.Errorf("TCP_CORK on the capped connection's socket: %v %v", err, cerr)
	}
	pipe, other := net.Pipe()
	t.Cleanup(func() { _ = pipe.Close(); _ = other.Close() })
	if _, err := (&capConn{Conn: pipe}).SyscallConn(); err == nil {
		t.Error("a connection without a socket gave one")
	}
}
