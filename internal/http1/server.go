// Package http1 owns HTTP/1.x on a connection: it reads requests off the wire, hands each to an
// http.Handler, frames the answers (Content-Length, chunked, or until close) and keeps the
// connection alive between requests. It takes net/http's place for HTTP/1 because that is
// where the front spent its time: net/http starts a goroutine and a read per request to notice
// a client that leaves, and the smuggling guard scanned every head a second time to see what
// net/http normalises away. Here a request's head is read once, ambiguous framing is refused
// as it is read, and a client that leaves is watched for only when a request takes long
// enough for it to matter (watch.go).
//
// It must not know about PHP or HTTP/2: a connection that opens with HTTP/2's preface, or
// negotiates h2 over TLS, is handed over to Server.HandOff (net/http serves HTTP/2 there). Of
// TLS it knows only that a *tls.Conn shakes hands before its first request.
//
// A connection always has a deadline while it waits for its client: the head's (from its
// first byte, ReadHeaderTimeout; the first head's from the accept, a TLS handshake included),
// the idle wait's (IdleTimeout), the body's (BodyTimeout, from each read), each write's
// (WriteTimeout); only while its handler runs, with the body read, does nothing wait on the
// client (the handler is bounded by its own means).
//
// A connection's lifecycle (conn.serve):
//
//	new ──(TLS handshake)──first byte──▶ head ──parsed──▶ active ──answered, keep-alive──▶ idle ──first byte──▶ head
//	 │                                    │                 │                                │
//	 │ preface, or h2 by ALPN             │ bad head:       │ Connection: close, an          │ idle timeout,
//	 ▼                                    │ 4xx/5xx         │ unread body too large, a       │ shutdown
//	handed to HandOff                     ▼                 ▼ failed write, a panic          ▼
//	                                    closed ◀──────────────────────────────────────────── closed
package http1

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/1.x connections with Handler.
type Server struct {
	Handler http.Handler

	// ReadHeaderTimeout bounds the reading of a request's head, from its first byte (the first
	// request of a connection: from the accept, a TLS handshake included). IdleTimeout bounds the wait for the next
	// request on a kept-alive connection (ReadHeaderTimeout when 0).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration

	// BodyTimeout bounds the wait for each read of a request body from the socket (nginx's
	// client_body_timeout): a body that stalls longer fails its reader's Read with an error
	// that errors.Is os.ErrDeadlineExceeded. WriteTimeout bounds the wait for each write of an
	// answer to the socket, files by sendfile included (nginx's send_timeout): a client that
	// reads nothing longer loses its connection. 0 means no limit.
	//
	// Some answers go to the socket past the connection's Write (by sendmsg: a head with a
	// large body; by sendfile: files): a connection with a method WriteFailed() is told when
	// one of those fails, as its Write would have seen it fail (httpserver resets such a
	// connection at its close).
	//
	// A moving deadline is moved at most every eighth of its length, not at every read or
	// write, so that a body in tiny pieces costs no call per piece: a wait may last up to
	// 9/8 of the timeout, never less than it.
	BodyTimeout  time.Duration
	WriteTimeout time.Duration

	// MaxHeaderBytes bounds a request's head, request line included; a larger one gets 431.
	// 0 means 64 KiB (nginx refuses at 32 KiB: four of its 8 KiB large_client_header_buffers).
	MaxHeaderBytes int

	// MaxHeaderFields bounds the number of header fields of a head; more get 431. 0 means 100.
	MaxHeaderFields int

	// MaxRequestLine bounds the request line (414 past it) and MaxFieldLine each header line
	// (431), without their line ends. 0 means 8 KiB, nginx's large_client_header_buffers.
	MaxRequestLine int
	MaxFieldLine   int

	// MaxBodyBytes, when set, refuses a chunk that would take a chunked body past it at
	// once, before reading it: the body's reader gets an *http.MaxBytesError. A declared
	// Content-Length is the handler's to refuse (before it reads the body).
	MaxBodyBytes int64

	// The limits of a head are enforced as it is read, so that no head costs more memory
	// than them, whatever its shape: a megabyte of one-byte lines is refused at the budget.

	// ConnContext, when set, derives each connection's context, which its requests' contexts
	// descend from.
	ConnContext func(context.Context, net.Conn) context.Context

	// HandOff, when set, takes the connections that speak HTTP/2: a cleartext one that opens
	// with HTTP/2's client preface, as a conn that replays the bytes already read, and a TLS
	// one that chose h2 by ALPN, as its *tls.Conn with nothing read. Without it a preface is
	// refused with 505.
	HandOff func(net.Conn)

	Logger *slog.Logger

	mu       sync.Mutex
	conns    map[*conn]struct{}
	closing  atomic.Bool
	listener net.Listener
	done     sync.WaitGroup
}

// ErrServerClosed is what Serve returns after Shutdown or Close.
var ErrServerClosed = http.ErrServerClosed

// Defaults of the head's limits.
const (
	defaultMaxHeaderBytes  = 64 << 10
	defaultMaxHeaderFields = 100
	defaultMaxLine         = 8 << 10
)

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

func (s *Server) maxHeaderBytes() int  { return orDefault(s.MaxHeaderBytes, defaultMaxHeaderBytes) }
func (s *Server) maxHeaderFields() int { return orDefault(s.MaxHeaderFields, defaultMaxHeaderFields) }
func (s *Server) maxRequestLine() int  { return orDefault(s.MaxRequestLine, defaultMaxLine) }
func (s *Server) maxFieldLine() int    { return orDefault(s.MaxFieldLine, defaultMaxLine) }

// Serve accepts connections on ln and serves each on a goroutine of its own until Shutdown or
// Close; then it returns ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.listener = ln
	s.mu.Unlock()
	var delay time.Duration
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// EMFILE and the like: wait a little, as net/http does, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.logger().Warn("accept failed; retrying", "err", err, "in", delay.String())
			time.Sleep(delay)
			continue
		}
		delay = 0
		c := s.newConn(rwc)
		if c == nil {
			continue
		}
		go c.serve()
	}
}

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// newConn registers a connection, or closes it and returns nil when the server is closing.
func (s *Server) newConn(rwc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		_ = rwc.Close()
		return nil
	}
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	c := newConn(s, rwc)
	s.conns[c] = struct{}{}
	s.done.Add(1)
	return c
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.done.Done()
}

// Shutdown stops accepting, closes idle connections and lets the others end their request in
// flight (their answer says Connection: close), until ctx is done; then it closes what is left
// and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginClose()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.closeIdle() == 0 {
			s.done.Wait()
			return nil
		}
		select {
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close closes the listener and every connection at once.
func (s *Server) Close() {
	s.beginClose()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.rwc.Close()
	}
	s.mu.Unlock()
}

func (s *Server) beginClose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing.Store(true)
	if s.listener != nil {
		_ = s.listener.Close()
	}
}

// closeIdle closes the connections waiting for a request and returns how many are left.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) || c.state.CompareAndSwap(stateNew, stateClosed) {
			_ = c.rwc.Close()
		}
	}
	return len(s.conns)
}
