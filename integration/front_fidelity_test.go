package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// frame is how an answer was framed: what a client sees of its length and its connection.
type frame struct {
	Status        int
	ContentLength int64 // -1: none
	Chunked       bool
	Close         bool // Connection: close
	BodyLen       int
}

// frameOf sends method path on a new HTTP/1.1 connection to base and returns how the answer
// was framed.
func frameOf(t *testing.T, base, method, path string) frame {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, method+" "+path+" HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return frame{resp.StatusCode, resp.ContentLength, len(resp.TransferEncoding) > 0, resp.Close, len(b)}
}

// TestAnswerFramingAsNginxFPM (issue 25 items 14, 26): the same scripts under classic mode and
// under nginx + PHP-FPM are framed alike: HEAD carries the script's Content-Length, never 0;
// the script's Content-Length survives flush() (no chunks); a Connection: close set by the
// script does not reach the client; a 1xx status left set when the answer starts is a 502.
func TestAnswerFramingAsNginxFPM(t *testing.T) {
	t.Parallel()
	requireNginxFPM(t)
	root := writeTree(t, map[string]string{
		"len.php":    `<?php header('Content-Length: 4615'); echo str_repeat('x', 4615);`,
		"nolen.php":  `<?php echo str_repeat('y', 100);`,
		"flush.php":  `<?php header('Content-Length: 3744'); echo str_repeat('z', 1000); flush(); echo str_repeat('z', 2744);`,
		"range.php":  `<?php http_response_code(206); header('Content-Range: bytes 0-9/100'); header('Content-Length: 10'); echo '01234'; flush(); echo '56789';`,
		"conn.php":   `<?php header('Connection: close'); echo 'ok';`,
		"status.php": `<?php http_response_code(150); echo 'x';`,
	})
	s := startServer(t, classicConfig(root, ""))
	fpm := startNginxFPM(t, root)
	for _, tc := range []struct{ method, path string }{
		{"HEAD", "/len.php"}, {"GET", "/len.php"}, {"HEAD", "/nolen.php"}, {"HEAD", "/flush.php"},
		{"GET", "/flush.php"}, {"GET", "/range.php"}, {"GET", "/conn.php"},
	} {
		ours, theirs := frameOf(t, s.URL, tc.method, tc.path), frameOf(t, fpm, tc.method, tc.path)
		if tc.path == "/conn.php" {
			// nginx sends a short answer of no declared length in chunks, Peregrine with its
			// length (it holds the whole answer): only the connection is compared.
			ours.ContentLength, ours.Chunked = theirs.ContentLength, theirs.Chunked
		}
		if ours != theirs {
			t.Errorf("%s %s: Peregrine %+v, nginx + PHP-FPM %+v", tc.method, tc.path, ours, theirs)
		}
		if tc.method == "HEAD" && ours.ContentLength == 0 {
			t.Errorf("%s %s: Content-Length: 0", tc.method, tc.path)
		}
	}
	// Here the two differ on purpose: nginx + PHP-FPM send the 150 as the answer's status line,
	// which a client takes for an interim answer and then waits for one that never comes;
	// Peregrine answers 502, as docs/security.md says.
	if got := frameOf(t, s.URL, "GET", "/status.php"); got.Status != http.StatusBadGateway {
		t.Errorf("http_response_code(150): %+v, want a 502", got)
	}
	s.log.waitFor(t, `the script set the HTTP status 150, a 1xx, which cannot end an answer: answering 502`, 10*time.Second)
}

// TestSlowClientsDoNotHoldTheSlots (issue 25 items 9, 10), with the daemon's own wiring of
// http.write_timeout, body_timeout and read_header_timeout: at max_connections 20, 20 clients
// that ask for a large static file (or an X-Sendfile answer) and never read, and 20 that send
// a body and the next request's first byte and then nothing, are all closed by the timeouts,
// and a normal client is answered after each wave.
func TestSlowClientsDoNotHoldTheSlots(t *testing.T) {
	t.Parallel()
	root := writeTree(t, map[string]string{
		"big.bin":  strings.Repeat("b", 16<<20), // more than the socket buffers hold
		"send.php": `<?php header('X-Sendfile: ' . __DIR__ . '/big.bin');`,
		"ok.php":   `<?php echo 'ok';`,
	})
	s := startServer(t, classicConfig(root, "  write_timeout: 1s\n  body_timeout: 1s\n  read_header_timeout: 1s\n  idle_timeout: 1s\n  max_connections: 20\n"))
	addr := strings.TrimPrefix(s.URL, "http://")
	for _, wave := range []struct{ name, send string }{
		{"a static file never read", "GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"an X-Sendfile answer never read", "GET /send.php HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"a body and the next request's first byte", "POST /ok.php HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloP"},
	} {
		conns := make([]net.Conn, 20)
		for i := range conns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, wave.send); err != nil {
				t.Fatal(err)
			}
			conns[i] = c
		}
		// Nothing of theirs is ever read: only the server's timeouts can free the 20 slots
		// for the next client (before, it waited in the backlog for good).
		time.Sleep(2 * time.Second)
		client := &http.Client{Timeout: 20 * time.Second}
		resp, err := client.Get(s.URL + "/ok.php")
		if err != nil {
			t.Fatalf("%s: a normal client after them: %v", wave.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("%s: a normal client after them: %d %q", wave.name, resp.StatusCode, b)
		}
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

// halfClosed sends GET path to base on a new connection, half-closes it (shutdown(SHUT_WR), as a
// client that leaves, or nc without -q) and returns all the server sent until it closed.
func halfClosed(t *testing.T, base, path string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("%s: the connection did not end: %v (read %q)", path, err, b)
	}
	return string(b)
}

// TestClientThatLeavesGetsNoAnswer (review of the HTTP front, items 4 and 6): a client that
// leaves (here: half-closes) before its answer gets none and is logged 499, as under nginx,
// whether its request was queued behind a busy worker (it got an empty 200) or running on a
// sequential worker, whose script runs to its end as under PHP-FPM (it got the answer, and
// the log said 200). A queued request never reaches PHP.
func TestClientThatLeavesGetsNoAnswer(t *testing.T) {
	t.Parallel()
	marks := filepath.Join(t.TempDir(), "marks")
	root := writeTree(t, map[string]string{
		"slow.php": `<?php file_put_contents('` + marks + `.began', $_GET['mark'] . "\n", FILE_APPEND); usleep(700000); file_put_contents('` + marks + `', $_GET['mark'] . "\n", FILE_APPEND); echo "the real answer\n";`,
	})
	s := startServer(t, "log:\n  format: json\n  access: true\n"+classicConfig(root, ""))

	if got := halfClosed(t, s.URL, "/slow.php?mark=running"); got != "" {
		t.Errorf("a client that left while its script ran got %q", got)
	}
	s.log.waitFor(t, `"query":"mark=running"[^\n]*"status":499`, 20*time.Second)

	type result struct {
		r   response
		err error
	}
	held := make(chan result, 1)
	go func() { // takes the only worker
		r, err := doErr(context.Background(), http.MethodGet, s.URL+"/slow.php?mark=holder", nil)
		held <- result{r, err}
	}()
	eventually(t, 20*time.Second, "the holder's script began", func() bool { return strings.Contains(readFile(marks+".began"), "holder") })
	if got := halfClosed(t, s.URL, "/slow.php?mark=queued"); got != "" {
		t.Errorf("a client that left while its request was queued got %q", got)
	}
	s.log.waitFor(t, `"query":"mark=queued"[^\n]*"status":499`, 20*time.Second)
	if h := <-held; h.err != nil || h.r.Status != 200 {
		t.Fatalf("the request that held the worker: %d %q %v", h.r.Status, h.r.Body, h.err)
	}
	// One worker, in order: had the queued request run, it would have before this one.
	if r := get(t, s.URL+"/slow.php?mark=after"); r.Status != 200 {
		t.Fatalf("after: %d %q", r.Status, r.Body)
	}
	if got := readFile(marks); got != "running\nholder\nafter\n" {
		t.Errorf("scripts ran to their end: %q; want the one that was running, not the queued one", got)
	}
}

// TestHTTP2StreamThatLeavesGetsNoAnswer: over HTTP/2 a client leaves by resetting its stream
// (RST_STREAM, what a browser's abort or a Go client's cancelled context sends), not by
// closing the connection; the request is treated as TestClientThatLeavesGetsNoAnswer's: logged
// 499, run to its end when it was running, never run when it was queued; and the connection's
// other streams go on.
func TestHTTP2StreamThatLeavesGetsNoAnswer(t *testing.T) {
	t.Parallel()
	marks := filepath.Join(t.TempDir(), "marks")
	root := writeTree(t, map[string]string{
		"slow.php": `<?php file_put_contents('` + marks + `.began', $_GET['mark'] . "\n", FILE_APPEND); usleep(700000); file_put_contents('` + marks + `', $_GET['mark'] . "\n", FILE_APPEND); echo "the real answer\n";`,
	})
	s := startServer(t, "log:\n  format: json\n  access: true\n"+classicConfig(root, ""))
	h2c := newClient(&http.Transport{Protocols: protocols(false, false, true)})
	t.Cleanup(h2c.CloseIdleConnections)
	leave := func(mark string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/slow.php?mark="+mark, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := h2c.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("%s: a stream reset after 250 ms got %d %q", mark, resp.StatusCode, b)
		}
	}

	leave("running")
	s.log.waitFor(t, `"query":"mark=running"[^\n]*"status":499`, 20*time.Second)

	held := make(chan error, 1)
	go func() { // takes the only worker, on the same connection
		r, err := h2c.Get(s.URL + "/slow.php?mark=holder")
		if err == nil {
			_, err = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if err == nil && (r.StatusCode != 200 || r.ProtoMajor != 2) {
				err = fmt.Errorf("%s %d", r.Proto, r.StatusCode)
			}
		}
		held <- err
	}()
	eventually(t, 20*time.Second, "the holder's script began", func() bool { return strings.Contains(readFile(marks+".began"), "holder") })
	leave("queued")
	s.log.waitFor(t, `"query":"mark=queued"[^\n]*"status":499`, 20*time.Second)
	if err := <-held; err != nil {
		t.Fatalf("the stream that held the worker, beside the reset one: %v", err)
	}
	r, err := h2c.Get(s.URL + "/slow.php?mark=after")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || r.ProtoMajor != 2 {
		t.Fatalf("after: %s %d", r.Proto, r.StatusCode)
	}
	if got := readFile(marks); got != "running\nholder\nafter\n" {
		t.Errorf("scripts ran to their end: %q; want the one that was running, not the queued one", got)
	}
}
