package httpserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// bodyServer serves a Handler that answers 200 "ok" from a stub worker, with a body timeout of
// d, on a real listener capped at maxConns connections.
func bodyServer(t *testing.T, d time.Duration, maxConns int, opts Options) *Server {
	t.Helper()
	opts.BodyTimeout = d
	h := NewHandler(frameRunner{{protocol.TypeResponse, 0, responsePayload(t, 200, "ok")}}, opts)
	s, err := Listen("127.0.0.1:0", h, ServerOptions{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second, BodyTimeout: d, MaxConnections: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	return s
}

// stalledBody sends a head declaring a 100000-byte body and 10 bytes of it, then nothing, and
// returns the connection and the answer, read within 30 s.
func stalledBody(t *testing.T, addr, path string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_, _ = io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789")
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	return c, resp
}

// readEOF reports whether the server closes c within 30 s, after draining what it sends.
func readEOF(c net.Conn) error {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, c)
	return err // nil: EOF
}

// TestStalledBodyGets408AndFreesItsSlot (issue 15 item 6): a body that stalls past the body
// timeout gets 408, the connection closes, and its slot of max_connections goes to the next
// client; one that arrives slowly but steadily, each read within the timeout, is served.
func TestStalledBodyGets408AndFreesItsSlot(t *testing.T) {
	// A second: the steady body's reads come a quarter of it apart, which a loaded machine
	// (race build) stretches by far less than the rest.
	const d = time.Second
	s := bodyServer(t, d, 1, Options{})
	c, resp := stalledBody(t, s.Addr().String(), "/")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close || !strings.Contains(string(body), "http.body_timeout") {
		t.Fatalf("stalled body: %d close=%v %q", resp.StatusCode, resp.Close, body)
	}
	if err := readEOF(c); err != nil {
		t.Fatalf("the connection stayed open after 408: %v", err)
	}
	// The only slot is free again: a slow, steady body (8 reads over twice the timeout).
	c2, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, _ = io.WriteString(c2, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 80\r\n\r\n")
	for range 8 {
		time.Sleep(d / 4)
		_, _ = io.WriteString(c2, "0123456789")
	}
	_ = c2.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil {
		t.Fatalf("a steady body after the stalled one: %v", err)
	}
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("steady body: %d %q", resp.StatusCode, body)
	}
}

// TestUnreadStalledBodyIsDropped: a request answered without its body being read (here 413 on
// its Content-Length) leaves net/http draining the body to keep the connection; a client that
// stalls there is dropped after the body timeout instead of holding the connection for good.
func TestUnreadStalledBodyIsDropped(t *testing.T) {
	s := bodyServer(t, 300*time.Millisecond, 1, Options{MaxBodySize: 1000})
	c, resp := stalledBody(t, s.Addr().String(), "/")
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
	resp.Body.Close()
	if err := readEOF(c); err != nil {
		t.Fatalf("the connection stayed open with its body stalled: %v", err)
	}
}

// TestStalledH2BodyIsAnswered408: over HTTP/2 (h2c) a POST stream whose body stalls gets 408
// and is reset; the connection's other streams go on.
func TestStalledH2BodyIsAnswered408(t *testing.T) {
	s := bodyServer(t, 300*time.Millisecond, 4, Options{})
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = io.WriteString(pw, "0123456789") }() // then nothing
	req, _ := http.NewRequestWithContext(context.Background(), "POST", s.URL()+"/", pr)
	req.ContentLength = 100000
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("stalled h2 body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled h2 body: %s %d %q", resp.Proto, resp.StatusCode, body)
	}
	// The stream is over for the server: writing more of the body fails (reset), not blocks.
	werr := make(chan error, 1)
	go func() { _, err := pw.Write(make([]byte, 1<<20)); werr <- err }()
	select {
	case err := <-werr:
		if err == nil {
			t.Error("1 MiB more of the stalled stream's body was taken")
		}
	case <-time.After(30 * time.Second):
		t.Error("the stalled stream was never reset")
	}
	r2, err := client.Post(s.URL()+"/", "text/plain", strings.NewReader("fine"))
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	if b, _ := io.ReadAll(r2.Body); r2.StatusCode != 200 || string(b) != "ok" || r2.ProtoMajor != 2 {
		t.Fatalf("another stream: %s %d %q", r2.Proto, r2.StatusCode, b)
	}
}

func TestReadError(t *testing.T) {
	if status, err := readError(errors.Join(errors.New("read"), errDeadline())); status != 408 || err != errBodyTimeout {
		t.Errorf("deadline: %d %v", status, err)
	}
	if status, _ := readError(io.ErrUnexpectedEOF); status != 400 {
		t.Errorf("cut body: %d", status)
	}
}

// errDeadline returns the error a read past its deadline gives on a real connection.
func errDeadline() error {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_ = a.SetReadDeadline(time.Now())
	_, err := a.Read(make([]byte, 1))
	return err
}

// TestRefusalsStillSkipTheBody: with a body timeout, a request refused on its head (413 for a
// declared 2 GB, with or without Expect: 100-continue) is answered at once, without a
// 100 Continue and without the server waiting for a body it will not read: net/http still sees
// the body it made and closes such a connection instead of draining it.
func TestRefusalsStillSkipTheBody(t *testing.T) {
	s := bodyServer(t, time.Minute, 4, Options{MaxBodySize: 1000})
	for _, head := range []string{
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2147483648\r\n\r\nxx",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n",
	} {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, head)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second)) // well before the body timeout
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%q: status %d, want 413 (a 100 means the body was asked for)", head, resp.StatusCode)
		}
	}
}

// TestStalledChunkedAndMultipartBodiesGet408: a chunked body that stalls between chunks, and
// a multipart body the server parses itself (the cli runtime) that stalls mid-part, are timed
// out too.
func TestStalledChunkedAndMultipartBodiesGet408(t *testing.T) {
	s := bodyServer(t, 300*time.Millisecond, 2, Options{ParseMultipart: true, TempDir: t.TempDir()})
	for _, head := range []string{
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n" +
			"--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\n\r\npart of a file",
	} {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, head)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to %q: %v", head, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
			t.Fatalf("%q: %d close=%v", head, resp.StatusCode, resp.Close)
		}
		if err := readEOF(c); err != nil {
			t.Fatalf("the connection stayed open after 408: %v", err)
		}
	}
}

// TestStalledPipelinesDoNotLockOut (issue 25 item 10): 60 connections that each send a body
// and the first byte of the next request, at max_connections 50, are all closed by the
// timeouts, and a normal client is answered after them; with the body bounded by http1
// (ServerOptions) or by the handler (Options, as an HTTP/2 stream's).
func TestStalledPipelinesDoNotLockOut(t *testing.T) {
	const d = 300 * time.Millisecond
	for _, inHTTP1 := range []bool{true, false} {
		t.Run(fmt.Sprintf("http1 bounds the body: %v", inHTTP1), func(t *testing.T) {
			h := NewHandler(frameRunner{{protocol.TypeResponse, 0, responsePayload(t, 200, "ok")}}, Options{BodyTimeout: d})
			opts := ServerOptions{ReadHeaderTimeout: d, IdleTimeout: d, MaxConnections: 50}
			if inHTTP1 {
				opts.BodyTimeout = d
			}
			s, err := Listen("127.0.0.1:0", h, opts)
			if err != nil {
				t.Fatal(err)
			}
			serve(t, s)
			var wg sync.WaitGroup
			var open atomic.Int64
			for i := range 60 {
				next := []string{"P", "POST /next HT"}[i%2] // under and over the 4 bytes awaited idle
				c, err := net.Dial("tcp", s.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"+next)
					if readEOF(c) != nil {
						open.Add(1)
					}
				}()
			}
			wg.Wait()
			if n := open.Load(); n > 0 {
				t.Fatalf("%d of 60 stalled connections still open after 30 s", n)
			}
			c := &http.Client{Timeout: 10 * time.Second}
			resp, err := c.Get(s.URL() + "/")
			if err != nil {
				t.Fatalf("a normal client after them: %v", err)
			}
			_ = resp.Body.Close()
		})
	}
}
