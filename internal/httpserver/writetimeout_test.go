package httpserver

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// h2Frame returns one HTTP/2 frame (RFC 9113 4.1).
func h2Frame(typ, flags byte, stream uint32, payload []byte) []byte {
	f := make([]byte, 9, 9+len(payload))
	f[0], f[1], f[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	f[3], f[4] = typ, flags
	binary.BigEndian.PutUint32(f[5:], stream)
	return append(f, payload...)
}

// h2cGet opens an HTTP/2 connection with prior knowledge to addr and asks for path on stream
// 1, by hand, so that the test decides what the client reads and which windows it opens:
// window is the stream and connection window it grants (0: HTTP/2's 65,535 bytes, never
// renewed).
func h2cGet(t *testing.T, addr, path string, window uint32) net.Conn {
	t.Helper()
	c := dialSmall(t, addr)
	h2Get(t, c, path, window)
	return c
}

// dialSmall connects to addr with a small receive buffer: a client that stops reading fills
// its socket soon.
func dialSmall(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	tc := c.(*net.TCPConn)
	_ = tc.SetReadBuffer(4 << 10)
	return tc
}

// h2Get is h2cGet on c, a connection that speaks HTTP/2 already open.
func h2Get(t *testing.T, c net.Conn, path string, window uint32) {
	t.Helper()
	out := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	var settings []byte
	if window > 0 {
		settings = binary.BigEndian.AppendUint16(settings, 0x4) // SETTINGS_INITIAL_WINDOW_SIZE
		settings = binary.BigEndian.AppendUint32(settings, window)
	}
	out = append(out, h2Frame(0x4, 0, 0, settings)...)
	out = append(out, h2Frame(0x4, 0x1, 0, nil)...) // the ACK of the server's SETTINGS
	if window > 65535 {
		out = append(out, h2Frame(0x8, 0, 0, binary.BigEndian.AppendUint32(nil, window-65535))...)
	}
	// :method GET, :scheme http, :path (literal), :authority h; HPACK without Huffman.
	block := []byte{0x82, 0x86, 0x04, byte(len(path))}
	block = append(block, path...)
	block = append(block, 0x41, 0x01, 'h')
	out = append(out, h2Frame(0x1, 0x5, 1, block)...) // END_STREAM | END_HEADERS
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
}

// TestH2AnswersHaveAWriteTimeout (review of issue 25): the connections http1 hands to
// net/http for HTTP/2 have http.write_timeout too. A client that never opens its flow-control
// window again (its socket read all along) and one that opens it wide and stops reading the
// socket each held its stream's handler (a PHP worker, a file) for good. Both now end at the
// write timeout, while a client that reads an answer longer than the timeout in all gets it
// whole, and a handler that works longer than it before writing is not cut off.
func TestH2AnswersHaveAWriteTimeout(t *testing.T) {
	const d = 300 * time.Millisecond
	// How each path's handler ended, apart: a handler that ends only when its client is
	// closed must not pass for another that ended in time.
	ended := map[string]chan error{}
	for _, p := range []string{"/window", "/socket", "/paced", "/late"} {
		ended[p] = make(chan error, 1)
	}
	chunk := make([]byte, 64<<10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ended := ended[r.URL.Path]
		switch r.URL.Path {
		case "/paced": // 3 s in all, ten times the timeout, in writes that each go out at once
			for range 30 {
				if _, err := w.Write(chunk[:1<<10]); err != nil {
					ended <- err
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(d / 3)
			}
			ended <- nil
		case "/late": // works longer than the timeout, then answers
			time.Sleep(3 * d)
			_, err := io.WriteString(w, "late")
			ended <- err
		default: // far more than any window or socket buffer holds
			var err error
			for sent := 0; sent < 256<<20 && err == nil; sent += len(chunk) {
				_, err = w.Write(chunk)
			}
			ended <- err
		}
	})
	s, err := Listen("127.0.0.1:0", h, ServerOptions{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, WriteTimeout: d})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	addr := s.Addr().String()
	waitEnd := func(t *testing.T, path string) error {
		t.Helper()
		select {
		case err := <-ended[path]:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("the handler is still writing to a client that takes nothing")
			return nil
		}
	}
	t.Run("window never reopened", func(t *testing.T) {
		c := h2cGet(t, addr, "/window", 0)
		go func() { _, _ = io.Copy(io.Discard, c) }()
		if err := waitEnd(t, "/window"); err == nil {
			t.Fatal("the answer went out whole to a client that took 64 KiB of it")
		}
	})
	// A client's receive buffer, small or large, decides how much the server's socket holds
	// when its writes stop, and so what a close with FIN left to the kernel.
	for _, rcvbuf := range []int{4 << 10, 4 << 20} {
		t.Run(fmt.Sprintf("socket never read, receive buffer %d", rcvbuf), func(t *testing.T) {
			c := h2cGet(t, addr, "/socket", 1<<31-1)
			_ = c.(*net.TCPConn).SetReadBuffer(rcvbuf)
			if err := waitEnd(t, "/socket"); err == nil {
				t.Fatal("the answer went out whole to a client that reads nothing")
			}
			// The connection ends too, whatever is left in its buffers, when the client
			// reads again: before, it read 0.4-1.5 MB and then waited for minutes.
			readToEnd(t, c, 10*time.Second)
		})
	}
	for _, path := range []string{"/paced", "/late"} {
		t.Run(path+" is answered whole", func(t *testing.T) {
			tr := &http.Transport{Protocols: new(http.Protocols)}
			tr.Protocols.SetUnencryptedHTTP2(true)
			defer tr.CloseIdleConnections()
			resp, body := getBody(t, &http.Client{Transport: tr, Timeout: 20 * time.Second}, s.URL()+path)
			if resp.ProtoMajor != 2 {
				t.Fatalf("answered over %s", resp.Proto)
			}
			if err := waitEnd(t, path); err != nil {
				t.Fatalf("the handler's write failed: %v (body %d bytes)", err, len(body))
			}
		})
	}
}

// readToEnd reads c to its end (EOF or a reset) and fails the test if that takes past limit.
func readToEnd(t *testing.T, c net.Conn, limit time.Duration) int64 {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(limit))
	n, err := io.Copy(io.Discard, c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection did not end within %v of the server's close (%d bytes read): %v", limit, n, err)
	}
	return n
}

// waitWriteFailed waits for the handler's answer to a client that reads nothing to end, which
// must be in an error.
func waitWriteFailed(t *testing.T, ended <-chan error) {
	t.Helper()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the answer went out whole to a client that reads nothing")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler is still writing to a client that takes nothing")
	}
}

// TestH2OverTLSEndsAfterAFailedWrite: over TLS too (where the coalescer sits under TLS), a
// connection whose socket nobody read ends at the write timeout, and a client that reads
// again reaches its end instead of what the kernel held.
func TestH2OverTLSEndsAfterAFailedWrite(t *testing.T) {
	roots, certFile, keyFile := testCertificate(t, t.TempDir())
	ended := make(chan error, 1)
	chunk := make([]byte, 64<<10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		for sent := 0; sent < 256<<20 && err == nil; sent += len(chunk) {
			_, err = w.Write(chunk)
		}
		ended <- err
	})
	s, err := Listen("127.0.0.1:0", h, ServerOptions{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
		WriteTimeout: 300 * time.Millisecond, TLS: &TLSOptions{CertFile: certFile, KeyFile: keyFile}})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	c := tls.Client(dialSmall(t, s.Addr().String()), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q", p)
	}
	h2Get(t, c, "/", 1<<31-1)
	waitWriteFailed(t, ended)
	readToEnd(t, c, 10*time.Second)
}

// TestResetConnResetsOnlyAfterAFailedWrite: a connection closed after a write failed is reset,
// so a client that reads again gets its end at once rather than what the kernel held; one
// whose writes all went out ends with FIN, its bytes all delivered.
func TestResetConnResetsOnlyAfterAFailedWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int // written in one go with a deadline
		fail bool
	}{
		{"all sent", 64 << 10, false},
		{"timed out", 64 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ln.Close() })
			rl := resetListener{ln}
			c := dialSmall(t, ln.Addr().String())
			s, err := rl.Accept()
			if err != nil {
				t.Fatal(err)
			}
			_ = s.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			n, err := s.Write(make([]byte, tc.size))
			if (err != nil) != tc.fail {
				t.Fatalf("write of %d: %d, %v", tc.size, n, err)
			}
			_ = s.Close()
			got := readToEnd(t, c, 10*time.Second)
			if !tc.fail && got != int64(tc.size) {
				t.Fatalf("read %d of %d bytes", got, tc.size)
			}
		})
	}
}

// TestHTTP1FailedWriteResets: an HTTP/1 connection whose answer's write failed is reset,
// whichever way http1 wrote it: through the connection's Write (pieces), or on the socket
// itself, by sendmsg (a head and a large body in one go) or sendfile (a file). The last two
// ended with FIN: a client that read again got what the kernel still held, seconds of it.
func TestHTTP1FailedWriteResets(t *testing.T) {
	const size = 32 << 20
	file := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(file, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		write func(w http.ResponseWriter) error
	}{
		{"pieces", func(w http.ResponseWriter) error {
			chunk := make([]byte, 64<<10)
			for sent := 0; sent < size; sent += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return err
				}
			}
			return nil
		}},
		{"one write (sendmsg)", func(w http.ResponseWriter) error {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, err := w.Write(make([]byte, size))
			return err
		}},
		{"file (sendfile)", func(w http.ResponseWriter) error {
			f, err := os.Open(file)
			if err != nil {
				return fmt.Errorf("test file: %w", err)
			}
			defer f.Close()
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, err = io.Copy(w, io.NewSectionReader(f, 0, size))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ended := make(chan error, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ended <- tc.write(w) })
			s, err := Listen("127.0.0.1:0", h, ServerOptions{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
				WriteTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			serve(t, s)
			c := dialSmall(t, s.Addr().String())
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			waitWriteFailed(t, ended)
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			n, err := io.Copy(io.Discard, c)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("after the failed write the client read %d bytes, then %v; want a reset", n, err)
			}
		})
	}
}
