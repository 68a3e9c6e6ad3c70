package http1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// serve starts a Server with h on a loopback port and returns its address.
func serve(t *testing.T, h http.Handler, opts ...func(*Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, ln, h, opts...)
	return ln.Addr().String()
}

// serveTLS is serve over TLS, with a certificate for 127.0.0.1 that roots holds.
func serveTLS(t *testing.T, h http.Handler, opts ...func(*Server)) (addr string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	serveOn(t, tls.NewListener(ln, cfg), h, opts...)
	return ln.Addr().String(), roots
}

// serveOn serves ln with h until the test ends.
func serveOn(t *testing.T, ln net.Listener, h http.Handler, opts ...func(*Server)) {
	t.Helper()
	s := &Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
	for _, o := range opts {
		o(s)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
}

// exchange sends raw on a new connection and returns everything the server sent until it
// closed the connection (or 2 s passed).
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, _ := io.ReadAll(c)
	return string(b)
}

// checkExchange checks that got holds each of want, in order, and none of not.
func checkExchange(t *testing.T, got string, want, not []string) {
	t.Helper()
	rest := got
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("no %q (in order) in:\n%s", w, got)
		}
		rest = rest[i+len(w):]
	}
	for _, n := range not {
		if strings.Contains(got, n) {
			t.Errorf("%q in:\n%s", n, got)
		}
	}
}

// echo answers with the method, target, Host, a header list and the body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%s %s host=%s cl=%d te=%v x=%q body=%q", r.Method, r.RequestURI, r.Host, r.ContentLength, r.TransferEncoding, r.Header["X"], b)
})

func TestRequestsAndTheirAnswers(t *testing.T) {
	addr := serve(t, echo)
	for _, tc := range []struct {
		name, raw string
		want      []string // substrings of the whole exchange, in order
		not       []string
	}{
		{"get, closed", "GET /a?b=1 HTTP/1.1\r\nHost: h\r\nX: 1\r\nConnection: close\r\n\r\n",
			[]string{"HTTP/1.1 200 OK\r\n", "Content-Length: ", "Connection: close\r\n", "GET /a?b=1 host=h cl=0 te=[] x=[\"1\"] body=\"\""}, nil},
		{"two pipelined then close", "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"GET /1 host=h", "HTTP/1.1 200 OK", "GET /2 host=h"}, nil},
		{"post with length", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
			[]string{"cl=5", `body="hello"`}, nil},
		{"chunked with extension and trailer", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nT: v\r\n\r\n",
			[]string{"cl=-1 te=[chunked]", `body="hello!"`}, nil},
		{"bad chunk size", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
			[]string{"400 Bad Request", "malformed chunked encoding"}, nil},
		{"chunk longer than its size", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n",
			[]string{"400 Bad Request", "malformed chunked encoding"}, nil},
		{"http/1.0 closes", "GET / HTTP/1.0\r\n\r\n", []string{"HTTP/1.0 200 OK\r\n", "Connection: close", "host= "}, []string{"keep-alive"}},
		{"http/1.0 keep-alive", "GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
			[]string{"Connection: keep-alive", "GET /1", "Connection: close", "GET /2"}, nil},
		{"absolute form", "GET http://other:8/x?y HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", []string{"GET /x?y host=other:8"}, nil},
		{"absolute form, no path", "GET HTTPS://other?y HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", []string{"GET /?y host=other"}, nil},
		{"absolute form with credentials", "GET http://u:p@other/x HTTP/1.1\r\nHost: h\r\n\r\n", []string{"400 Bad Request", "user:password"}, []string{"u:p"}},
		{"OPTIONS *, answered by the server", "OPTIONS * HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", []string{"200 OK", "Content-Length: 0\r\n"}, []string{"OPTIONS"}},
		{"CONNECT", "CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n", []string{"405 Method Not Allowed"}, nil},
		{"empty lines before", "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", []string{"400 Bad Request"}, []string{"200 OK"}}, // as net/http
		{"a stray CRLF after a POST", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx\r\nGET /2 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{`body="x"`, "GET /2 host=h"}, []string{"400"}},
		{"bare LF", "GET / HTTP/1.1\nHost: h\nConnection: close\n\n", []string{"200 OK"}, nil},
		{"duplicate equal lengths", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab", []string{`body="ab"`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkExchange(t, exchange(t, addr, tc.raw), tc.want, tc.not)
		})
	}
}

func TestRefusedHeads(t *testing.T) {
	ran := make(chan string, 100)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran <- r.RequestURI }), func(s *Server) {
		s.MaxHeaderBytes = 4096
	})
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n"
	for _, tc := range []struct {
		name, raw string
		status    int
	}{
		{"content-length and transfer-encoding", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, 400},
		{"transfer-encoding before content-length", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", 400},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n\tb\r\n\r\n" + smuggled, 400},
		{"transfer-encoding in an obs-fold", "POST / HTTP/1.1\r\nHost: h\r\nX: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled, 400},
		{"transfer-encoding in http/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, 400},
		{"two transfer-encodings", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501},
		{"gzip transfer-encoding", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\nabc", 501},
		{"differing content-lengths", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
		{"signed content-length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\na", 400},
		{"hex content-length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x1\r\n\r\na", 400},
		{"no host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"bad host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost: h\r\nX : y\r\n\r\n", 400},
		{"no colon", "GET / HTTP/1.1\r\nHost: h\r\nX\r\n\r\n", 400},
		{"control in a value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x01b\r\n\r\n", 400},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", 400},
		{"bare CR in a value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", 400},
		{"head too large", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("a", 5000) + "\r\n\r\n", 431},
		{"request line too large", "GET /" + strings.Repeat("a", 5000) + " HTTP/1.1\r\nHost: h\r\n\r\n", 431},
		{"http/2.0 request line", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505},
		{"garbage version", "GET / HTTX/1.1\r\nHost: h\r\n\r\n", 400},
		{"short garbage", "x\r\n\r\n", 400},
		{"method not a token", "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400},
		{"unknown expectation", "POST / HTTP/1.1\r\nHost: h\r\nExpect: magic\r\nContent-Length: 1\r\n\r\na", 417},
		{"h2 preface without h2", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := exchange(t, addr, tc.raw)
			want := "HTTP/1.1 " + strconv.Itoa(tc.status) + " "
			if !strings.HasPrefix(got, want) || !strings.Contains(got, "Connection: close\r\n") {
				t.Errorf("want %q with Connection: close, got:\n%s", want, got)
			}
			if strings.Count(got, "HTTP/1.1") != 1 {
				t.Errorf("more than one answer:\n%s", got)
			}
		})
	}
	select {
	case uri := <-ran:
		t.Errorf("the handler ran for %s", uri)
	default:
	}
}

func TestAnswerFraming(t *testing.T) {
	big := strings.Repeat("b", 3*pendingSize)
	mux := http.NewServeMux()
	mux.HandleFunc("/short", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "<html>hi") })
	mux.HandleFunc("/long", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, big) })
	mux.HandleFunc("/flushed", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "a")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "b")
	})
	mux.HandleFunc("/declared", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		_, _ = io.WriteString(w, big)
	})
	mux.HandleFunc("/short-of-declared", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		_, _ = io.WriteString(w, "abc")
	})
	mux.HandleFunc("/204", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		w.WriteHeader(http.StatusNoContent)
		_, err := io.WriteString(w, "abc")
		if !errors.Is(err, http.ErrBodyNotAllowed) {
			panic("a body was allowed after 204")
		}
	})
	mux.HandleFunc("/304", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotModified)
	})
	mux.HandleFunc("/hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		_, _ = io.WriteString(w, "done")
	})
	mux.HandleFunc("/injected", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "a\r\nSet-Cookie: evil=1")
		w.Header()["Bad Name"] = []string{"x"}
	})
	mux.HandleFunc("/declared-and-chunked", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		w.Header().Set("Transfer-Encoding", r.URL.Query().Get("te"))
		_, _ = io.WriteString(w, "abc")
	})
	mux.HandleFunc("/two-lengths", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Length"] = r.URL.Query()["cl"] // PHP's header("Content-Length: 4", false)
		_, _ = io.WriteString(w, "abc")
	})
	mux.HandleFunc("/typed", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // no sniffing
		_, _ = io.WriteString(w, "<html>")
	})
	addr := serve(t, mux)
	for _, tc := range []struct {
		name, raw string
		want      []string
		not       []string
	}{
		{"short gets a length and a sniffed type", "GET /short HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Content-Length: 8\r\n", "Content-Type: text/html; charset=utf-8\r\n", "Date: ", "\r\n\r\n<html>hi"}, []string{"chunked"}},
		{"long is chunked", "GET /long HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Transfer-Encoding: chunked\r\n", "\r\n\r\n", "1800\r\n" + big + "\r\n0\r\n\r\n"}, []string{"Content-Length"}},
		{"long over http/1.0 ends with the connection", "GET /long HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			[]string{"Connection: close\r\n\r\n" + big}, []string{"chunked", "Content-Length"}},
		{"flushed is chunked", "GET /flushed HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Transfer-Encoding: chunked\r\n", "1\r\na\r\n1\r\nb\r\n0\r\n\r\n"}, nil},
		{"declared length is kept", "GET /declared HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Content-Length: 6144\r\n", big}, []string{"chunked"}},
		{"head gets the length, no body", "HEAD /short HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Content-Length: 8\r\n"}, []string{"<html>"}},
		{"204 has no length", "GET /204 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"HTTP/1.1 204 No Content\r\n"}, []string{"Content-Length", "chunked", "abc"}},
		{"304 has no type", "GET /304 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"HTTP/1.1 304 Not Modified\r\n"}, []string{"Content-Type", "Content-Length", "chunked"}},
		{"early hints come first", "GET /hints HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", "HTTP/1.1 200 OK\r\n", "done"}, nil},
		{"no early hints for http/1.0", "GET /hints HTTP/1.0\r\n\r\n",
			[]string{"HTTP/1.0 200 OK\r\n", "done"}, []string{"103"}},
		{"no header injection", "GET /injected HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"X-A: a Set-Cookie: evil=1\r\n"}, []string{"\r\nSet-Cookie", "Bad Name"}},
		// A proxy in front that reads Transfer-Encoding over Content-Length (RFC 9112 6.3) would
		// take the raw body for chunks: net/http drops the handler's Transfer-Encoding then.
		{"declared length drops the handler's chunked", "GET /declared-and-chunked?te=chunked HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Content-Length: 3\r\n", "\r\n\r\nabc"}, []string{"Transfer-Encoding", "chunked"}},
		{"declared length drops the handler's gzip", "GET /declared-and-chunked?te=gzip HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Content-Length: 3\r\n", "\r\n\r\nabc"}, []string{"Transfer-Encoding", "gzip"}},
		{"declared length drops the handler's identity", "GET /declared-and-chunked?te=identity HTTP/1.1\r\nHost: h\r\n\r\nGET /short HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Content-Length: 3\r\n", "\r\n\r\nabc", "<html>hi"}, []string{"Transfer-Encoding", "identity"}},
		{"head with a declared length drops the handler's chunked", "HEAD /declared-and-chunked?te=chunked HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Content-Length: 3\r\n"}, []string{"Transfer-Encoding", "abc"}},
		// Two lengths would let a proxy in front pick either (RFC 9112 6.3 has it refuse, or
		// worse, not): differing ones are dropped, equal ones go out once.
		{"differing lengths are dropped", "GET /two-lengths?cl=3&cl=4 HTTP/1.1\r\nHost: h\r\n\r\nGET /short HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Content-Length: 3\r\n", "\r\n\r\nabc", "<html>hi"}, []string{"Content-Length: 4", "Content-Length: 3\r\nContent-Length"}},
		{"equal lengths go out once", "GET /two-lengths?cl=3&cl=3 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Content-Length: 3\r\n", "\r\n\r\nabc"}, []string{"Content-Length: 3\r\nContent-Length"}},
		{"explicitly untyped", "GET /typed HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			[]string{"Content-Length: 6\r\n"}, []string{"Content-Type"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkExchange(t, exchange(t, addr, tc.raw), tc.want, tc.not)
		})
	}
	t.Run("short of its declared length closes", func(t *testing.T) {
		got := exchange(t, addr, "GET /short-of-declared HTTP/1.1\r\nHost: h\r\n\r\nGET /short HTTP/1.1\r\nHost: h\r\n\r\n")
		if !strings.Contains(got, "Content-Length: 10\r\n") || strings.Contains(got, "<html>") {
			t.Errorf("the connection went on after an answer short of its length:\n%s", got)
		}
	})
}

// TestExpectContinue: 100 Continue goes out when the handler reads the body, not before, and
// a body the handler never asked for ends the connection.
func TestExpectContinue(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/read", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	mux.HandleFunc("/refuse", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusRequestEntityTooLarge) })
	addr := serve(t, mux)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	_, _ = io.WriteString(c, "POST /read HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("want 100 Continue first, got %q, %v", line, err)
	}
	_, _ = br.ReadString('\n')
	_, _ = io.WriteString(c, "abc")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "abc" {
		t.Errorf("body %q", b)
	}

	got := exchange(t, addr, "POST /refuse HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	if strings.Contains(got, "100 Continue") || !strings.Contains(got, "413") || !strings.Contains(got, "Connection: close") {
		t.Errorf("a refused body: %s", got)
	}
}

// TestClientThatLeavesCancelsTheRequest: a handler that waits longer than a watch takes to
// start sees its context cancelled when the client closes.
func TestClientThatLeavesCancelsTheRequest(t *testing.T) {
	cancelled := make(chan error, 1)
	started := make(chan struct{})
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			cancelled <- r.Context().Err()
		case <-time.After(10 * time.Second):
			cancelled <- nil
		}
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	time.Sleep(2 * watchAfter) // let the watch start, then leave
	_ = c.Close()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Errorf("the handler's context: %v", err)
	}
}

// TestWatchKeepsAPipelinedRequest: a request sent while the one before is still running (and
// watched) is served, byte for byte.
func TestWatchKeepsAPipelinedRequest(t *testing.T) {
	first := make(chan struct{})
	var once sync.Once
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			once.Do(func() { close(first) })
			time.Sleep(10 * watchAfter)
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	<-first
	time.Sleep(2 * watchAfter) // the watch reads now
	_, _ = io.WriteString(c, "GET /second HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	if !strings.Contains(string(b), "/slow") || !strings.Contains(string(b), "/second") {
		t.Errorf("answers:\n%s", b)
	}
}

// TestPanicsEndTheConnection: http.ErrAbortHandler breaks the answer off silently, another
// panic is logged; the server goes on.
func TestPanicsEndTheConnection(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		panic("boom")
	}))
	for _, path := range []string{"/abort", "/boom"} {
		got := exchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		if !strings.Contains(got, "7\r\npartial\r\n") || strings.Contains(got, "0\r\n\r\n") {
			t.Errorf("%s: want a broken-off chunked answer, got:\n%s", path, got)
		}
	}
}

// TestShutdownLetsTheRequestInFlightEnd: the answer in flight is sent, with Connection: close.
func TestShutdownLetsTheRequestInFlightEnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	running, release := make(chan struct{}), make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(running)
		<-release
		_, _ = io.WriteString(w, "late")
	})}
	go func() { _ = s.Serve(ln) }()
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	<-running
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	// The idle connection is closed by the shutdown.
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection: %v, want EOF", err)
	}
	close(release)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	if !strings.Contains(string(b), "Connection: close") || !strings.HasSuffix(string(b), "late") {
		t.Errorf("answer in flight:\n%s", b)
	}
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestPrefaceIsHandedOver: a connection opening with HTTP/2's preface goes to Preface with
// every byte, even when the preface comes a byte at a time.
func TestPrefaceIsHandedOver(t *testing.T) {
	got := make(chan string, 1)
	addr := serve(t, echo, func(s *Server) {
		s.HandOff = func(c net.Conn) {
			defer c.Close()
			b := make([]byte, 24)
			_, err := io.ReadFull(c, b)
			got <- fmt.Sprint(string(b), err)
		}
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, ch := range []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") {
		_, _ = c.Write([]byte{ch})
		time.Sleep(time.Millisecond)
	}
	if s := <-got; s != "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n<nil>" {
		t.Errorf("handed over: %q", s)
	}
}

// fileConn records whether the files it is given by ReadFrom could go out by sendfile: an
// *os.File under at most one *io.LimitedReader, as the TCP socket's ReadFrom wants them.
type fileConn struct {
	net.Conn
	sendfile *atomic.Bool
}

func (c fileConn) ReadFrom(r io.Reader) (int64, error) {
	src := r
	if lr, ok := src.(*io.LimitedReader); ok {
		src = lr.R
	}
	if _, ok := src.(*os.File); ok {
		c.sendfile.Store(true)
	}
	return io.Copy(c.Conn, r)
}

type fileListener struct {
	net.Listener
	sendfile *atomic.Bool
}

func (l fileListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return fileConn{c, l.sendfile}, err
}

// TestFilesGoOutBySendfile: http.ServeContent's file reaches the socket's ReadFrom as a file.
func TestFilesGoOutBySendfile(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var sendfile atomic.Bool
	serveFileOnce(t, fileListener{ln, &sendfile}, nil, false) // cork_test.go
	if !sendfile.Load() {
		t.Error("the file did not reach the socket as a file: no sendfile")
	}
}

// TestSizesAroundTheBuffers: a header line longer than the read buffer, and bodies of sizes
// around it and around a pipe's, with a length or in chunks, arrive whole.
func TestSizesAroundTheBuffers(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "x=%d body=%d sum=%d", len(r.Header.Get("X")), len(b), bytes.Count(b, []byte("b")))
	}))
	long := strings.Repeat("h", 2*bufSize-17) // under the 8 KiB a header line may have
	got := exchange(t, addr, "GET / HTTP/1.1\r\nHost: h\r\nX: "+long+"\r\nConnection: close\r\n\r\n")
	if !strings.Contains(got, fmt.Sprintf("x=%d body=0", len(long))) {
		t.Errorf("a %d-byte header: %.200s", len(long), got)
	}
	for _, n := range []int{bufSize - 1, bufSize, bufSize + 1, 64<<10 - 1, 64 << 10, 64<<10 + 1, 1 << 20} {
		body := strings.Repeat("b", n)
		want := fmt.Sprintf("x=0 body=%d sum=%d", n, n)
		withLength := fmt.Sprintf("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", n, body)
		var chunked strings.Builder
		chunked.WriteString("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
		for rest := body; rest != ""; {
			k := min(len(rest), 3000)
			fmt.Fprintf(&chunked, "%x\r\n%s\r\n", k, rest[:k])
			rest = rest[k:]
		}
		chunked.WriteString("0\r\n\r\n")
		for name, raw := range map[string]string{"length": withLength, "chunked": chunked.String()} {
			if got := exchange(t, addr, raw); !strings.HasSuffix(got, want) {
				t.Errorf("%d bytes, %s: %.300s", n, name, got[max(0, len(got)-300):])
			}
		}
	}
}

// smallSendBuffer gives every accepted connection a 64 KiB send buffer, so that a file does
// not fit in the kernel and goes out at the client's pace.
type smallSendBuffer struct{ net.Listener }

func (l smallSendBuffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(64 << 10)
	}
	return c, err
}

// TestASteadySlowReaderGetsTheWholeRange: WriteTimeout bounds each wait for room in the socket,
// not a piece of the file: a client reading 32 KiB every 20 ms (1.6 MB/s) gets a 6 MiB range of
// a file http.ServeContent sends (a Range or a validator takes that way). It was cut off after
// its first 4 MiB piece missed the deadline (about 3 MB read, then a reset), as a review found
// with static files and X-Sendfile answers.
func TestASteadySlowReaderGetsTheWholeRange(t *testing.T) {
	const size = 6 << 20
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, bytes.Repeat([]byte("0123456789abcdef"), size/16), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, WriteTimeout: time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f, err := os.Open(path)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			defer f.Close()
			http.ServeContent(w, r, "big", time.Time{}, f)
		})}
	done := make(chan error, 1)
	go func() { done <- s.Serve(smallSendBuffer{ln}) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		<-done
	})
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10) })
	}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: h\r\nRange: bytes=100-\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	var got []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			if err != io.EOF {
				t.Logf("read: %v", err)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	head, body, ok := bytes.Cut(got, []byte("\r\n\r\n"))
	if !ok || !bytes.HasPrefix(head, []byte("HTTP/1.1 206 ")) {
		t.Fatalf("answer: %.200q", got)
	}
	if len(body) != size-100 {
		t.Fatalf("got %d bytes of the range's %d", len(body), size-100)
	}
}
