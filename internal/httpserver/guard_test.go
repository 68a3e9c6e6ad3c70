package httpserver

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestCheckRequestLimits(t *testing.T) {
	lim := Limits{}
	many := func(n int, f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	cookies := func(n int) string {
		return strings.Join(many(n, func(i int) string { return fmt.Sprintf("%d=1", (i+1)<<20) }), "; ")
	}
	tests := []struct {
		name   string
		target string
		header http.Header
		limits Limits
		want   int
	}{
		{"plain", "/", http.Header{"Accept": {"*/*"}}, lim, 0},
		{"100 headers", "/", headerOf(many(99, func(i int) string { return fmt.Sprint(i << 20) })), lim, 0},
		{"101 headers", "/", headerOf(many(101, func(i int) string { return fmt.Sprint(i << 20) })), lim, 431},
		{"repeated values count", "/", http.Header{"X": many(101, func(int) string { return "v" })}, lim, 431},
		{"configured count", "/", http.Header{"X": many(11, func(int) string { return "v" })}, Limits{MaxHeaderCount: 10}, 431},
		{"8 KiB line", "/", http.Header{"X": {strings.Repeat("a", 8192-3)}}, lim, 0},
		{"line over 8 KiB", "/", http.Header{"X": {strings.Repeat("a", 8192-2)}}, lim, 431},
		{"1000 cookies", "/", http.Header{"Cookie": {cookies(500), cookies(500)}}, lim, 0},
		{"1001 cookies", "/", http.Header{"Cookie": {cookies(500), cookies(501)}}, lim, 431},
		{"empty cookie pairs do not count", "/", http.Header{"Cookie": {strings.Repeat(";", 2000) + "a=1"}}, lim, 0},
		{"two Authorization", "/", http.Header{"Authorization": {"Basic YTpi", "Basic Yzpk"}}, lim, 400},
		{"one Authorization", "/", http.Header{"Authorization": {"Basic YTpi"}}, lim, 0},
		{"1000 query fields", "/?" + strings.Join(many(1000, func(i int) string { return fmt.Sprint(i<<20, "=1") }), "&"), nil, lim, 0},
		{"1001 query fields", "/?" + strings.Join(many(1001, func(i int) string { return fmt.Sprint(i<<20, "=1") }), "&"), nil, lim, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tt.target, nil)
			for k, v := range tt.header {
				r.Header[k] = v
			}
			got, msg := checkRequest(r, tt.limits)
			if got != tt.want {
				t.Errorf("checkRequest = %d %q, want %d", got, msg, tt.want)
			}
			if got != 0 && msg == "" {
				t.Error("a refusal without a message")
			}
		})
	}
}

func headerOf(names []string) http.Header {
	h := http.Header{}
	for _, n := range names {
		h[n] = []string{"x"}
	}
	return h
}

func TestDropHeadersRemovesProxy(t *testing.T) {
	h := http.Header{"Proxy": {"http://evil.example:3128"}, "Accept": {"*/*"}}
	dropHeaders(h)
	if _, ok := h["Proxy"]; ok {
		t.Error("Proxy header kept (httpoxy)")
	}
	if h.Get("Accept") != "*/*" {
		t.Error("another header dropped")
	}
}

// guardServer serves with the server the daemon uses (http1 in front), over TLS when tlsOn:
// every request is checked, refused ones get refuse, the others 200 with their body echoed. It
// returns how to connect to it.
func guardServer(t *testing.T, tlsOn bool) (dial func() (net.Conn, error)) {
	t.Helper()
	opts := ServerOptions{ReadHeaderTimeout: 10 * time.Second}
	var roots *x509.CertPool
	if tlsOn {
		var certFile, keyFile string
		roots, certFile, keyFile = testCertificate(t, t.TempDir())
		opts.TLS = &TLSOptions{CertFile: certFile, KeyFile: keyFile}
	}
	s, err := Listen("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status, msg := checkRequest(r, Limits{}); status != 0 {
			refuse(w, status, msg)
			return
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s [%s]", r.Method, r.RequestURI, b)
	}), opts)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	addr := s.Addr().String()
	if !tlsOn {
		return func() (net.Conn, error) { return net.Dial("tcp", addr) }
	}
	return func() (net.Conn, error) {
		return tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
	}
}

// exchange writes raw to a new connection and returns every response read until the server
// closes it or nothing more comes.
func exchange(t *testing.T, dial func() (net.Conn, error), raw string) (responses []*http.Response, closed bool) {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			ne, ok := err.(net.Error)
			return responses, !ok || !ne.Timeout()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		responses = append(responses, resp)
		if resp.Close {
			_, err := br.ReadByte()
			return responses, err == io.EOF
		}
	}
}

// TestSmugglingIsRefusedAndClosed, on cleartext and TLS connections alike.
func TestSmugglingIsRefusedAndClosed(t *testing.T) {
	dials := map[string]func() (net.Conn, error){"cleartext": guardServer(t, false), "tls": guardServer(t, true)}
	smuggled := "GET /hidden HTTP/1.1\r\nHost: x\r\n\r\n"
	tests := []struct {
		name string
		raw  string
	}{
		{"Content-Length and Transfer-Encoding", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " +
			fmt.Sprint(len("0\r\n\r\n"+smuggled)) + "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"Transfer-Encoding before Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n"},
		{"Transfer-Encoding in an obs-fold", "POST / HTTP/1.1\r\nHost: x\r\nX-Pad: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled},
		{"any obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n" + smuggled},
		{"Transfer-Encoding in HTTP/1.0", "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled},
	}
	for _, tt := range tests {
		for proto, dial := range dials {
			t.Run(proto+"/"+tt.name, func(t *testing.T) {
				responses, closed := exchange(t, dial, tt.raw)
				if len(responses) != 1 {
					t.Fatalf("%d responses, want exactly one 400 (a second means a smuggled request was served)", len(responses))
				}
				if responses[0].StatusCode != http.StatusBadRequest {
					t.Errorf("status %d, want 400", responses[0].StatusCode)
				}
				if !closed {
					t.Error("the connection stayed open after a framing error")
				}
			})
		}
	}
}

func TestBodiesAreFollowedOnKeepAlive(t *testing.T) {
	dial := guardServer(t, false)
	// A chunked body containing what looks like a bad head, a Content-Length body, a pipelined
	// GET: all three served, none refused.
	chunk := "X: a\r\n b\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	body := "\r\n folded\r\n\r\n"
	raw := "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(chunk), chunk) +
		fmt.Sprintf("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body) +
		"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	responses, _ := exchange(t, dial, raw)
	var got []string
	for _, r := range responses {
		b, _ := io.ReadAll(r.Body)
		got = append(got, fmt.Sprint(r.StatusCode, " ", strings.SplitN(string(b), " [", 2)[0]))
	}
	want := []string{"200 POST /a", "200 POST /b", "200 GET /c"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("got %q, want %q", got, want)
	}
}
