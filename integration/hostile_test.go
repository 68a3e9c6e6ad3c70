package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"mime/multipart"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statusOf sends raw bytes on a fresh connection and returns the answer's status code, 0 when
// the server closes the connection without one, and how long that took.
func statusOf(t *testing.T, addr string, raw string) (int, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(20 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0, time.Since(start)
	}
	code, _ := strconv.Atoi(f[1])
	return code, time.Since(start)
}

// The short version of the stress suite's hostile clients (stress_clients_test.go): each gets a
// clear answer without reaching PHP, and the server keeps serving.
func TestHostileRequestsGetClearAnswers(t *testing.T) {
	t.Parallel()
	s := startServer(t, "http:\n  read_header_timeout: 500ms\nworkers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n")
	addr := strings.TrimPrefix(s.URL, "http://")
	var many bytes.Buffer
	mw := multipart.NewWriter(&many)
	for i := range 1001 {
		_ = mw.WriteField(fmt.Sprint("p", i), "v")
	}
	_ = mw.Close()
	tests := []struct {
		name string
		raw  string
		want int
	}{
		{"garbage request line", "GARBAGE\r\n\r\n", 400},
		{"NUL in the target", "GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"no Host", "GET /pid HTTP/1.1\r\n\r\n", 400},
		{"negative Content-Length", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400},
		{"invalid chunk size", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400},
		{"chunk longer than its size", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n", 400},
		{"headers over 1 MiB", "GET /pid HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20+8<<10) + "\r\n\r\n", 431},
		{"2 GB declared", fmt.Sprintf("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nxx", 2<<30), 413},
		{"multipart declaring 2 GB", fmt.Sprintf("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n--", mw.FormDataContentType(), 2<<30), 413},
		{"multipart with 1,001 parts", fmt.Sprintf("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", mw.FormDataContentType(), many.Len(), many.String()), 413},
	}
	for _, tt := range tests {
		if got, _ := statusOf(t, addr, tt.raw); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
		}
	}
	// A client that never finishes its headers is cut off at read_header_timeout.
	status, after := statusOf(t, addr, "GET /pid HTTP/1.1\r\nHost: x\r\nX-Slow: s")
	if (status != 0 && status != http.StatusBadRequest && status != http.StatusRequestTimeout) || after > 5*time.Second {
		t.Errorf("slow headers: status %d after %s; want the connection closed at read_header_timeout", status, after)
	}
	// None reached PHP: this is the worker's first request.
	r := get(t, s.URL+"/served")
	if f := strings.Fields(string(r.Body)); r.Status != 200 || len(f) != 2 || f[1] != "1" {
		t.Fatalf("after the hostile requests: %d %q; want the worker's first request", r.Status, r.Body)
	}
}
