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
	// request of a connection: from the accept). IdleTimeout bounds the wait for the next
	// request on a kept-alive connection (ReadHeaderTimeout when 0).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration

	// MaxHeaderBytes bounds a request's head, request line included; a larger one gets 431.
	// 0 means 1 MiB.
	MaxHeaderBytes int

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

const defaultMaxHeaderBytes = 1 << 20

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
