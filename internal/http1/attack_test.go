package http1

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPipelinedBurstIsAnsweredInOrder (review of issue 25): 60 requests of every framing
// (GET, HEAD, Content-Length and chunked bodies with extensions and trailers, HTTP/1.0
// keep-alive, a body the handler leaves unread) in one write are answered one by one, in
// order, each with its own body, and nothing after the last one that ends the connection.
func TestPipelinedBurstIsAnsweredInOrder(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("unread") == "" {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%s %s %q", r.Method, r.URL.Path, b)
			return
		}
		fmt.Fprintf(w, "%s %s unread", r.Method, r.URL.Path)
	}))
	var raw strings.Builder
	var methods, want []string
	for i := range 60 {
		path := fmt.Sprintf("/r%d", i)
		switch i % 6 {
		case 0:
			fmt.Fprintf(&raw, "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", path)
			methods, want = append(methods, "GET"), append(want, "GET "+path+` ""`)
		case 1:
			body := strings.Repeat("b", i*97)
			fmt.Fprintf(&raw, "POST %s HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
			methods, want = append(methods, "POST"), append(want, fmt.Sprintf("POST %s %q", path, body))
		case 2:
			fmt.Fprintf(&raw, "PUT %s HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;q=\"a;b\"\r\nabc\r\n1\r\nd\r\n0\r\nContent-Length: 99\r\n\r\n", path)
			methods, want = append(methods, "PUT"), append(want, "PUT "+path+` "abcd"`)
		case 3:
			fmt.Fprintf(&raw, "HEAD %s HTTP/1.1\r\nHost: h\r\n\r\n", path)
			methods, want = append(methods, "HEAD"), append(want, "")
		case 4:
			fmt.Fprintf(&raw, "GET %s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", path)
			methods, want = append(methods, "GET"), append(want, "GET "+path+` ""`)
		case 5:
			fmt.Fprintf(&raw, "POST %s?unread=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nGET /", path)
			methods, want = append(methods, "POST"), append(want, "POST "+path+" unread")
		}
	}
	raw.WriteString("GET /last HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /after-close HTTP/1.1\r\nHost: h\r\n\r\n")
	methods, want = append(methods, "GET"), append(want, `GET /last ""`)

	c := dial(t, addr)
	if _, err := io.WriteString(c, raw.String()); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i, w := range want {
		resp, err := http.ReadResponse(br, &http.Request{Method: methods[i]})
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || string(b) != w {
			t.Fatalf("answer %d: %q (%v), want %q", i, b, err, w)
		}
	}
	if rest, _ := io.ReadAll(br); len(rest) > 0 {
		t.Fatalf("more after the answer that closed the connection: %q", rest)
	}
}

// TestSlowDripHeadIsCutAtTheHeaderTimeout (review of issue 25, slowloris): a head that
// arrives a byte at a time, each byte well within the header timeout, is cut at the header
// timeout counted from its first byte, for the first request and for one after a keep-alive
// answer: a byte now and then does not move the deadline.
func TestSlowDripHeadIsCutAtTheHeaderTimeout(t *testing.T) {
	const d = 300 * time.Millisecond
	addr := serve(t, echo, func(s *Server) { s.ReadHeaderTimeout, s.IdleTimeout = d, d })
	head := "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-Drip: 1\r\n", 50) + "\r\n"
	for _, tc := range []struct{ name, before string }{
		{"first request", ""},
		{"after a keep-alive answer", "GET /first HTTP/1.1\r\nHost: h\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			if tc.before != "" {
				_, _ = io.WriteString(c, tc.before)
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
			}
			// The drip must outlast the timeout by far: 568 bytes, one every d/10.
			sent := 0
			deadline := time.Now().Add(30 * time.Second)
			for ; sent < len(head) && time.Now().Before(deadline); sent++ {
				if _, err := c.Write([]byte{head[sent]}); err != nil {
					break // closed by the server
				}
				time.Sleep(d / 10)
			}
			if sent == len(head) {
				t.Fatalf("the whole head was dripped over %d writes, the connection still open", sent)
			}
			if !closedWithin(c, 10*time.Second) {
				t.Fatal("the connection is still open")
			}
		})
	}
}

// TestExpectContinueRefusedThenBodyAnyway (review of issue 25): a request with Expect:
// 100-continue refused before its body is read gets no 100 Continue and a Connection: close;
// a client that sends its body anyway, with a request inside it, has nothing more served.
func TestExpectContinueRefusedThenBodyAnyway(t *testing.T) {
	served := make(chan string, 4)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served <- r.URL.Path
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	}))
	inner := "GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n"
	for _, tc := range []struct{ name, body string }{
		{"small body", inner},
		{"body past what is drained", inner + strings.Repeat("x", maxDrain)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			_, _ = fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(tc.body))
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if strings.Contains(resp.Status, "Continue") || resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
				t.Fatalf("status %d, close %v: want 413 and Connection: close", resp.StatusCode, resp.Close)
			}
			_, _ = io.WriteString(c, tc.body) // may fail: the server may be gone
			if rest, _ := io.ReadAll(br); len(rest) > 0 {
				t.Fatalf("more after the refusal: %q", rest)
			}
			if p := <-served; p != "/upload" {
				t.Fatalf("served %s", p)
			}
			select {
			case p := <-served:
				t.Fatalf("served %s from within a refused body", p)
			default:
			}
		})
	}
}

// TestNoContinueAfterTheAnswerBegan (review of issue 25): a handler that starts its answer
// (flush, as a PHP script's flush() does) and reads the body after must not have a
// "100 Continue" written into the answer's body, where it corrupts the chunked framing and
// desynchronises a proxy in front; net/http sends no 100 once the answer began. A body read
// on another goroutine than the answer's writes (as the PHP handler reads it) races neither.
func TestNoContinueAfterTheAnswerBegan(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/concurrent" {
			got := make(chan string, 1)
			go func() { b, _ := io.ReadAll(r.Body); got <- string(b) }()
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = io.WriteString(w, "x")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, <-got)
			return
		}
		_, _ = io.WriteString(w, "x")
		w.(http.Flusher).Flush()
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	for _, path := range []string{"/flushed", "/concurrent"} {
		t.Run(path, func(t *testing.T) {
			for range 20 {
				c := dial(t, addr)
				_, _ = io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\nConnection: close\r\n\r\n")
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				var resp *http.Response
				var err error
				for resp == nil || resp.StatusCode < 200 {
					if resp, err = http.ReadResponse(br, nil); err != nil {
						t.Fatal(err)
					}
				}
				// The head is out: the client sends its body, as curl does after a wait.
				_, _ = io.WriteString(c, "abc")
				b, err := io.ReadAll(resp.Body)
				if err != nil || string(b) != "xabc" {
					t.Fatalf("body %q, %v; want \"xabc\"", b, err)
				}
				_ = c.Close()
			}
		})
	}
}

// TestTLSFirstHeadIsBoundedFromTheAccept (review of the HTTP front): on TLS the handshake and
// the first head share ReadHeaderTimeout, counted from the accept, as the package doc says;
// the head's timeout started again after the handshake, so a slow handshake bought a slow head
// a second budget. A late handshake whose head comes at once is still served.
func TestTLSFirstHeadIsBoundedFromTheAccept(t *testing.T) {
	const d = 2 * time.Second
	addr, roots := serveTLS(t, echo, func(s *Server) { s.ReadHeaderTimeout, s.IdleTimeout = d, d })
	for _, tc := range []struct {
		name   string
		late   time.Duration // between the accept and the handshake
		pause  time.Duration // between the head's first line and its end
		served bool
	}{
		// 0.7 d left for the handshake and the head, which a loaded machine (race build) needs.
		{"head at once", d * 3 / 10, 0, true},
		// The head ends 1.2 d from the accept, well within d from the handshake.
		{"head ending past the budget", d * 7 / 10, d / 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := dial(t, addr)
			time.Sleep(tc.late) // the handshake late in the budget
			c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
			if err := c.Handshake(); err != nil {
				t.Fatal(err)
			}
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n")
			time.Sleep(tc.pause)
			_, _ = io.WriteString(c, "\r\n")
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, _ := io.ReadAll(c)
			if served := strings.HasPrefix(string(got), "HTTP/1.1 200 "); served != tc.served {
				t.Fatalf("served %v, want %v: %q", served, tc.served, got)
			}
		})
	}
}
