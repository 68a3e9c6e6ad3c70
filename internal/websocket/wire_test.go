package websocket

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// What the frame tests (differential_test.go, fuzz_test.go) share: a stand-in for PHP that
// accepts every connection and records its events, a server whose connection records what the
// server wrote, and a client that sends a byte stream after a valid upgrade.

// wireDeadline bounds one exchange: the bytes sent, the server's end of the connection.
const wireDeadline = 10 * time.Second

// fakePHP is PHP's side of a hub in tests: it accepts every upgrade, answers every event with
// an empty reply (or, with echo, one that sends each message back) and records the events,
// each as its own copy.
type fakePHP struct {
	echo   bool
	mu     sync.Mutex
	events []Event
	closed chan struct{} // closed with the close event
}

func newFakePHP() *fakePHP { return &fakePHP{closed: make(chan struct{})} }

func (p *fakePHP) Do(_ context.Context, call *worker.Call) (int, error) {
	if len(call.Frame) < protocol.HeaderSize {
		return 0, fmt.Errorf("fakePHP: a frame of %d bytes", len(call.Frame))
	}
	req, err := protocol.DecodeRequest(call.Frame[protocol.HeaderSize:])
	if err != nil {
		return 0, err
	}
	e, err := DecodeEvent(req.Body) // req.Body is its own copy
	if err != nil {
		return 0, err
	}
	var head []protocol.Field
	if e.Kind == KindOpen {
		head = []protocol.Field{{Name: acceptHeader, Value: "accept"}}
	}
	var reply []byte
	if p.echo && e.Kind == KindMessage {
		reply = AppendReply(nil, &Reply{Actions: []Action{{Op: OpSend, Binary: e.Binary, Data: e.Data}}})
	}
	resp, err := protocol.AppendResponse(nil, 0, &protocol.Response{Status: http.StatusOK, Headers: head, Body: reply})
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	p.events = append(p.events, e)
	if e.Kind == KindClose {
		close(p.closed)
	}
	p.mu.Unlock()
	return 1, call.Answer.Frame(protocol.TypeResponse, 0, resp[protocol.HeaderSize:])
}

func (p *fakePHP) seen() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.events
}

// recConn is the server's end of a connection: it keeps what the server wrote.
type recConn struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (c *recConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.mu.Lock()
	c.out.Write(b[:n])
	c.mu.Unlock()
	return n, err
}

func (c *recConn) written() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}

// recListener wraps each connection it accepts in a recConn.
type recListener struct {
	net.Listener
	conns chan *recConn
}

func (l *recListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &recConn{Conn: c}
	select {
	case l.conns <- rc:
	default: // one connection an exchange: a second is no part of it
	}
	return rc, nil
}

// wireServer is an HTTP server on loopback that serves one exchange with handler.
type wireServer struct {
	srv   *httptest.Server
	conns chan *recConn
}

func startWireServer(handler http.HandlerFunc) *wireServer {
	srv := httptest.NewUnstartedServer(handler)
	s := &wireServer{srv: srv, conns: make(chan *recConn, 1)}
	srv.Listener = &recListener{Listener: srv.Listener, conns: s.conns}
	srv.Start()
	return s
}

// hubHandler serves upgrades into h as the front does: the upgrade's head as PHP sees it.
func hubHandler(h *Hub) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h.Upgrade(w, r, &protocol.Request{Method: r.Method, URI: r.RequestURI, Path: r.URL.Path,
			Protocol: r.Proto, Scheme: "http", Headers: []protocol.Field{{Name: "host", Value: r.Host}}})
	}
}

// upgradeRequest is a valid client handshake (RFC 6455 4.1).
const upgradeRequest = "GET /ws HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

// exchange upgrades a connection to s, sends in, and, unless keepOpen, shuts the sending side
// so the server reads to the end of in. It returns the server's end of the connection once the
// server closed it (the client reads to EOF), or an error when the upgrade failed or the
// server did not close within wireDeadline.
func (s *wireServer) exchange(in []byte, keepOpen bool) (*recConn, error) {
	c, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wireDeadline))
	if _, err := io.WriteString(c, upgradeRequest); err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, fmt.Errorf("the upgrade's answer: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, fmt.Errorf("the upgrade was answered %s", resp.Status)
	}
	var sc *recConn
	select {
	case sc = <-s.conns:
	case <-time.After(wireDeadline):
		return nil, errors.New("the server's end of the connection was never accepted")
	}
	// The client reads while it writes: the server's answers (pongs, a close frame) never
	// wait for it. A server that closes first may make the writes fail: the rest of in is
	// then not sent, as with a real client.
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		read <- err
	}()
	_, _ = c.Write(in)
	if !keepOpen {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	if err := <-read; err != nil && isTimeout(err) {
		return sc, fmt.Errorf("the server did not close the connection within %s of the input's end", wireDeadline)
	}
	return sc, nil
}

func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// serverClose returns the code of the first close frame in what a server wrote after its
// 101 answer (1005 for a close frame without a body), or 0 when it sent none.
func serverClose(out []byte) int {
	_, out, ok := bytes.Cut(out, []byte("\r\n\r\n"))
	if !ok {
		return 0
	}
	for len(out) >= 2 {
		op, n := out[0]&0xf, int(out[1]&0x7f)
		out = out[2:]
		switch n {
		case 126:
			if len(out) < 2 {
				return 0
			}
			n, out = int(binary.BigEndian.Uint16(out)), out[2:]
		case 127:
			if len(out) < 8 || binary.BigEndian.Uint64(out) > uint64(len(out)) {
				return 0
			}
			n, out = int(binary.BigEndian.Uint64(out)), out[8:]
		}
		if n > len(out) {
			return 0
		}
		if op == 0x8 {
			if n < 2 {
				return 1005
			}
			return int(binary.BigEndian.Uint16(out))
		}
		out = out[n:]
	}
	return 0
}

// leftGoroutines returns the stacks of goroutines still running code of this package or of
// the WebSocket libraries, waiting up to wireDeadline for them to end.
func leftGoroutines() string {
	deadline := time.Now().Add(wireDeadline)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.HasPrefix(g, "goroutine ") && !strings.Contains(g, "leftGoroutines") &&
				(strings.Contains(g, "peregrine/internal/websocket.") || strings.Contains(g, "gorilla/websocket.")) &&
				!strings.Contains(g, "testing.tRunner") && !strings.Contains(g, "testing.(*F)") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
