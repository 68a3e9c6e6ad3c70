package httpserver

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/peregrinephp/peregrine/internal/http1"
)

// ServerOptions configure the public listener.
type ServerOptions struct {
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// BodyTimeout and WriteTimeout bound each read of a request body and each write of an
	// answer on HTTP/1 connections (http.body_timeout, http.write_timeout; http1.Server);
	// Options has them for HTTP/2 streams. 0 means no limit.
	BodyTimeout  time.Duration
	WriteTimeout time.Duration
	// MaxBodySize refuses a chunk that would take a body past it before reading it
	// (http.max_body_size); 0 means no limit.
	MaxBodySize int64
	// Limits bound a request head as HTTP/1 reads it: its field count and line lengths.
	Limits Limits
	Logger *slog.Logger

	// MaxConnections caps the open client connections (http.max_connections); at the cap the
	// listener stops accepting until one closes. 0 means MaxConnections(0, 0).
	MaxConnections int

	// TLS, when set, makes the listener serve HTTPS, HTTP/2 and HTTP/1.1 negotiated by ALPN.
	// Without it the listener serves cleartext HTTP/1.1 and HTTP/2 with prior knowledge (h2c).
	TLS *TLSOptions
}

// maxHeadBytes bounds a request's head, HTTP/1 (as it is read) and HTTP/2 alike: tens of
// KiB, as nginx refuses past 32 KiB (four 8 KiB large_client_header_buffers).
const maxHeadBytes = 64 << 10

// MaxConcurrentStreams is the most HTTP/2 streams a client may have open on one connection.
const MaxConcurrentStreams = 128

// Server is the public HTTP listener, and with TLS the redirect listener beside it.
type Server struct {
	srv *http.Server  // HTTP/2, on the connections h1 hands it
	h1  *http1.Server // HTTP/1, on every connection first
	h2  *handoff      // the connections h1 found to speak HTTP/2, for srv
	ln  net.Listener
	log *slog.Logger

	tls  bool
	acme *acmeManager // nil without ACME

	redirect   *http.Server // nil without http.tls.redirect_address
	redirectLn net.Listener
}

// Listen binds addr now, so that a port in use is reported before any worker starts.
func Listen(addr string, h http.Handler, opts ServerOptions) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (http.address): %w", addr, err)
	}
	ln = limitListener(ln, opts.MaxConnections) // listener.go
	ln = resetListener{ln}                      // writetimeout.go: reset after a failed write
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           withWriteTimeout(h, opts.WriteTimeout), // writetimeout.go
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    maxHeadBytes,
		ConnContext:       ConnContext,
		ErrorLog:          errorLog(log),
		Protocols:         new(http.Protocols),
		// nginx's http2_max_concurrent_streams; more are refused (REFUSED_STREAM), and
		// clients open them once others end. With connAnswerMemory (answer.go) it bounds what
		// one HTTP/2 connection that reads nothing holds.
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: MaxConcurrentStreams,
			// A socket nobody reads ends the connection at http.write_timeout, as http1 does;
			// a stream the client grants no window for ends by withWriteTimeout.
			WriteByteTimeout: opts.WriteTimeout,
		},
	}
	// HTTP/1 is served by http1, which hands the connections that speak HTTP/2 to net/http:
	// over TLS those that chose h2 by ALPN, in cleartext those that open with the preface (h2c
	// with prior knowledge; no Upgrade: h2c).
	s := &Server{srv: srv, ln: ln, log: log, h2: newHandoff(ln.Addr())}
	lim := opts.Limits.withDefaults()
	s.h1 = &http1.Server{
		Handler:           h,
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		IdleTimeout:       opts.IdleTimeout,
		BodyTimeout:       opts.BodyTimeout,
		WriteTimeout:      opts.WriteTimeout,
		MaxBodyBytes:      opts.MaxBodySize,
		MaxHeaderBytes:    srv.MaxHeaderBytes,
		MaxHeaderFields:   lim.MaxHeaderCount,
		MaxRequestLine:    lim.MaxHeaderLine,
		MaxFieldLine:      lim.MaxHeaderLine,
		ConnContext:       ConnContext,
		HandOff:           func(c net.Conn) { s.h2.hand(coalesceWrites(c)) }, // coalesce.go
		Logger:            log,
	}
	srv.Protocols.SetHTTP1(true)
	if opts.TLS == nil {
		srv.Protocols.SetUnencryptedHTTP2(true)
		return s, nil
	}
	srv.Protocols.SetHTTP2(true)
	s.tls = true
	if err := s.listenTLS(opts); err != nil {
		_ = ln.Close()
		return nil, err
	}
	// net/http serves h2 on the connections handed to it only when its config offers h2.
	for _, p := range []string{"h2", "http/1.1"} {
		if !slices.Contains(srv.TLSConfig.NextProtos, p) {
			srv.TLSConfig.NextProtos = append(srv.TLSConfig.NextProtos, p)
		}
	}
	s.ln = tls.NewListener(coalesceListener{ln}, srv.TLSConfig)
	return s, nil
}

// listenTLS binds the redirect listener, if any, and sets up the certificates.
func (s *Server) listenTLS(opts ServerOptions) error {
	var redirectAddr net.Addr
	if a := opts.TLS.RedirectAddress; a != "" {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("listen on %s (http.tls.redirect_address): %w", a, err)
		}
		s.redirectLn, redirectAddr = limitListener(ln, redirectCap(opts.MaxConnections)), ln.Addr()
	}
	conf, m, err := newTLSConfig(opts.TLS, s.ln.Addr(), redirectAddr, s.log)
	if err != nil {
		if s.redirectLn != nil {
			_ = s.redirectLn.Close()
		}
		return err
	}
	s.srv.TLSConfig, s.acme = conf, m
	if s.redirectLn == nil {
		return nil
	}
	_, httpsPort, _ := net.SplitHostPort(s.ln.Addr().String())
	var rh http.Handler = redirectHandler(httpsPort)
	if m != nil {
		rh = m.httpChallenges(rh)
	}
	// The redirect reads no body, but net/http reads up to 256 KiB of one before it closes:
	// ReadTimeout bounds that, or a stalled body held the connection for good.
	s.redirect = &http.Server{
		Handler:           rh,
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		ReadTimeout:       opts.ReadHeaderTimeout + opts.BodyTimeout,
		WriteTimeout:      opts.WriteTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          s.srv.ErrorLog,
	}
	return nil
}

// redirectCap is the redirect listener's cap: an eighth of the main listener's (at least 16),
// as its connections are short, so that a flood on port 80 takes few descriptors beyond
// MaxConnections's.
func redirectCap(main int) int {
	if main <= 0 {
		main = MaxConnections(0, 0)
	}
	return max(16, main/8)
}

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// URL returns the server's base URL: https://host:port with TLS, http://host:port without.
func (s *Server) URL() string {
	if s.tls {
		return "https://" + s.ln.Addr().String()
	}
	return "http://" + s.ln.Addr().String()
}

// RedirectAddr returns the address of the redirect listener, or nil when there is none.
func (s *Server) RedirectAddr() net.Addr {
	if s.redirectLn == nil {
		return nil
	}
	return s.redirectLn.Addr()
}

// Serve accepts connections until Shutdown; it returns nil after a Shutdown. With ACME it first
// starts obtaining (or loading) the certificates in the background: until one is there, TLS
// handshakes for its domain fail.
func (s *Server) Serve() error {
	if s.redirect != nil {
		s.log.Info("redirecting to https", "address", s.redirectLn.Addr().String())
		go func() {
			if err := s.redirect.Serve(s.redirectLn); !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("redirect listener stopped", "err", err)
			}
		}()
	}
	if s.acme != nil {
		if err := s.acme.start(); err != nil {
			return err
		}
	}
	go func() { _ = s.srv.Serve(s.h2) }() // ends with Shutdown, as the handoff closes
	if err := s.h1.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting connections and waits for in-flight requests until ctx is done,
// then closes what is left. It also stops the redirect listener and the certificate renewals.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.redirect != nil {
		_ = s.redirect.Close() // redirects are answered at once: nothing to wait for
		_ = s.redirectLn.Close()
	}
	err := s.h1.Shutdown(ctx)
	if err != nil {
		s.h1.Close()
	}
	_ = s.h2.Close()
	if err2 := s.srv.Shutdown(ctx); err2 != nil {
		_ = s.srv.Close()
		err = cmp.Or(err, err2)
	}
	_ = s.ln.Close() // in case Serve never ran
	if s.acme != nil {
		s.acme.stop()
	}
	return err
}

// errorLog returns the error log of the servers: a client's failures (a TLS handshake it gave
// up, an HTTP/2 protocol error), which scanners cause all day on a public port, at debug;
// anything else at warn.
func errorLog(log *slog.Logger) *stdlog.Logger {
	return stdlog.New(errorLogWriter{log}, "", 0)
}

type errorLogWriter struct{ log *slog.Logger }

// clientFailures are the prefixes of net/http's messages about a client's failures.
var clientFailures = []string{"http: TLS handshake error", "http2: server connection error", "http: URL query contains semicolon"}

func (w errorLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	level := slog.LevelWarn
	for _, prefix := range clientFailures {
		if strings.HasPrefix(msg, prefix) {
			level = slog.LevelDebug
			break
		}
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}
