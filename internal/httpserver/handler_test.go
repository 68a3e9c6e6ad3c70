package httpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// runnerFunc adapts a function to Runner, to put the handler in front of chosen outcomes: it
// gets the whole REQUEST frame, body included, and returns the RESPONSE payload or an error.
type runnerFunc func(ctx context.Context, frame []byte) ([]byte, error)

func (f runnerFunc) Admit() error { return nil }

func (f runnerFunc) Do(ctx context.Context, c *worker.Call) (int, error) {
	c.Hold() // as the pool does: the call's bytes are released once it is done with them
	defer c.Drop()
	frame := c.Frame
	if c.Body != nil {
		rest, err := io.ReadAll(io.NewSectionReader(c.Body, 0, 1<<62))
		if err != nil {
			return 0, err
		}
		frame = append(slices.Clone(frame), rest...)
	}
	payload, err := f(ctx, frame)
	if err != nil {
		return 0, err
	}
	return 1, c.Answer.Frame(protocol.TypeResponse, 0, payload)
}

func TestFailuresMapToStatus(t *testing.T) {
	tests := []struct {
		err        error
		status     int
		retryAfter bool
	}{
		{&pool.Error{Status: 503, RetryAfter: true, Err: pool.ErrQueueFull}, 503, true},
		{&pool.Error{Status: 504, Err: worker.ErrExecTimeout}, 504, false},
		{fmt.Errorf("wrapped: %w", &pool.Error{Status: 502, Err: worker.ErrExited}), 502, false},
		{errors.New("anything else"), 500, false},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			h := NewHandler(runnerFunc(func(context.Context, []byte) ([]byte, error) { return nil, tt.err }), Options{})
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			if rec.Code != tt.status || (rec.Header().Get("Retry-After") != "") != tt.retryAfter {
				t.Fatalf("status %d retry-after %q", rec.Code, rec.Header().Get("Retry-After"))
			}
		})
	}
}

// TestExecTimeoutLogSaysWhatHappened: past exec_timeout a concurrent worker's request is
// cancelled and its worker serves on; the log used to say "worker killed" all the same.
func TestExecTimeoutLogSaysWhatHappened(t *testing.T) {
	tests := []struct {
		err       error
		want, not string
	}{
		{fmt.Errorf("%w: the worker was killed", worker.ErrExecTimeout), "worker killed", "cancelled"},
		{fmt.Errorf("%w: %w", worker.ErrExecTimeout, worker.ErrCancelled), "request cancelled, its worker serves on", "worker killed"},
	}
	for _, tt := range tests {
		var log bytes.Buffer
		h := NewHandler(runnerFunc(func(context.Context, []byte) ([]byte, error) {
			return nil, &pool.Error{Status: http.StatusGatewayTimeout, Err: tt.err}
		}), Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != http.StatusGatewayTimeout || !strings.Contains(log.String(), tt.want) || strings.Contains(log.String(), tt.not) {
			t.Errorf("%v: status %d, log %q: want %q, not %q", tt.err, rec.Code, log.String(), tt.want, tt.not)
		}
	}
}

func TestFrameCarriesTheRequest(t *testing.T) {
	var got *protocol.Request
	h := NewHandler(runnerFunc(func(_ context.Context, frame []byte) ([]byte, error) {
		r, err := protocol.DecodeRequest(frame[protocol.HeaderSize:])
		if err != nil {
			t.Fatal(err)
		}
		got = r
		payload, _ := protocol.AppendResponse(nil, 0, &protocol.Response{Status: 201,
			Headers: []protocol.Field{{Name: "content-length", Value: "999"}, {Name: "x-a", Value: "1"}, {Name: "X-A", Value: "2"}},
			Body:    []byte("made")})
		return payload[protocol.HeaderSize:], nil
	}), Options{MaxBodySize: 100})
	req := httptest.NewRequest("POST", "/p/a%20th?x=1&y[]=2", strings.NewReader("hello"))
	req.Header.Set("X-Forwarded-For", "10.0.0.1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 201 || rec.Body.String() != "made" || rec.Header().Get("Content-Length") != "4" ||
		strings.Join(rec.Header().Values("X-A"), ",") != "1,2" {
		t.Fatalf("response %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	if got.Method != "POST" || got.Path != "/p/a%20th" || got.Query != "x=1&y[]=2" || string(got.Body) != "hello" ||
		got.Headers[0] != (protocol.Field{Name: "host", Value: "example.com"}) {
		t.Fatalf("request %+v", got)
	}
}

func TestBodyLimits(t *testing.T) {
	called := false
	h := NewHandler(runnerFunc(func(context.Context, []byte) ([]byte, error) {
		called = true
		return nil, &pool.Error{Status: 503, RetryAfter: true, Err: pool.ErrStopped}
	}), Options{MaxBodySize: 10})
	tests := []struct {
		name string
		req  *http.Request
	}{
		{"declared", httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 11)))},
		{"chunked", func() *http.Request {
			r := httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 11)))
			r.ContentLength = -1
			return r
		}()},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, tt.req)
		if rec.Code != http.StatusRequestEntityTooLarge || called {
			t.Errorf("%s: status %d, runner called %v", tt.name, rec.Code, called)
		}
	}
}

func multipartRequest(t *testing.T, build func(*multipart.Writer)) *http.Request {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	build(mw)
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/", &body)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	return r
}

func TestParseMultipart(t *testing.T) {
	dir := t.TempDir()
	r := multipartRequest(t, func(mw *multipart.Writer) {
		_ = mw.WriteField("a[b]", "x y&z")
		_ = mw.WriteField("n", "1")
		w, _ := mw.CreateFormFile("f", `C:\Users\me\doc.txt`)
		_, _ = w.Write([]byte("content"))
		_, _ = mw.CreateFormFile("empty", "")
	})
	u, status, err := parseMultipart(r, 0, 0, dir)
	if err != nil {
		t.Fatalf("%d %v", status, err)
	}
	if u.form != "a[b]=x+y%26z&n=1" {
		t.Errorf("form = %q", u.form)
	}
	if len(u.files) != 2 || u.files[0].Name != "doc.txt" || u.files[0].Size != 7 || u.files[1].Error != uploadNoFile || u.files[1].TempPath != "" {
		t.Fatalf("files = %+v", u.files)
	}
	if b, _ := os.ReadFile(u.files[0].TempPath); string(b) != "content" {
		t.Errorf("temp file holds %q", b)
	}
	u.cleanup()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("cleanup left %d files", len(entries))
	}
}

func TestParseMultipartParts(t *testing.T) {
	fields := func(n int) func(*multipart.Writer) {
		return func(mw *multipart.Writer) {
			for i := range n {
				_ = mw.WriteField(fmt.Sprint("f", i), "v")
			}
		}
	}
	tests := []struct {
		name     string
		limit    int64
		maxParts int // http.max_input_vars
		build    func(*multipart.Writer)
		status   int // 0: accepted
	}{
		{"the default cap", 0, 0, fields(defaultMaxParts), 0},
		{"over the default cap", 0, 0, fields(defaultMaxParts + 1), http.StatusRequestEntityTooLarge},
		{"a larger max_input_vars", 0, 3000, fields(2500), 0},
		{"a smaller max_input_vars", 0, 10, fields(11), http.StatusRequestEntityTooLarge},
		{"NUL in a field name", 0, 0, func(mw *multipart.Writer) { _ = mw.WriteField("a\x00b", "v") }, http.StatusBadRequest},
		{"file over the body limit", 1000, 0, func(mw *multipart.Writer) {
			w, _ := mw.CreateFormFile("f", "big.bin")
			_, _ = w.Write(bytes.Repeat([]byte("x"), 5000))
		}, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			u, status, err := parseMultipart(multipartRequest(t, tt.build), tt.limit, tt.maxParts, dir)
			u.cleanup()
			if tt.status == 0 {
				if err != nil {
					t.Fatalf("refused: status %d err %v", status, err)
				}
				return
			}
			if err == nil || status != tt.status {
				t.Fatalf("status %d err %v, want %d", status, err, tt.status)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a rejected upload left %d temporary files", len(entries))
			}
		})
	}
}

func TestEscapeFieldName(t *testing.T) {
	tests := map[string]string{"a": "a", "a[]": "a[]", "a b[c d]": "a+b[c+d]", "x=y&z": "x%3Dy%26z"}
	for in, want := range tests {
		if got := escapeFieldName(in); got != want {
			t.Errorf("escapeFieldName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFailPropagatesCancellation: a request whose client left is broken off
// (http.ErrAbortHandler), with nothing written: not even a status, which the server would send.
func TestFailPropagatesCancellation(t *testing.T) {
	h := NewHandler(runnerFunc(func(context.Context, []byte) ([]byte, error) { return nil, context.Canceled }), Options{})
	rec := httptest.NewRecorder()
	defer func() {
		if p := recover(); p != http.ErrAbortHandler {
			t.Fatalf("the handler ended with %v; want http.ErrAbortHandler", p)
		}
		if rec.Body.Len() != 0 || rec.Flushed || len(rec.Header()) != 0 {
			t.Fatalf("answered a client that left: %q %v", rec.Body, rec.Header())
		}
	}()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
}

// A Content-Length is a claim: the body's buffer grows with the bytes that arrive, so a client
// declaring a huge body and sending a few bytes costs the server a few bytes (found by the
// stress suite: a declared 2 GB with max_body_size 0 made the daemon allocate 2 GB).
func TestDeclaredBodyLengthIsNotAllocatedUpFront(t *testing.T) {
	for _, limit := range []int64{0, 8 << 20} {
		h := NewHandler(runnerFunc(func(context.Context, []byte) ([]byte, error) {
			t.Error("a body shorter than its Content-Length reached the runner")
			return nil, &pool.Error{Status: 503, RetryAfter: true, Err: pool.ErrStopped}
		}), Options{MaxBodySize: limit})
		req := httptest.NewRequest("POST", "/", strings.NewReader("short"))
		req.ContentLength = 1 << 30
		if limit > 0 {
			req.ContentLength = limit
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		runtime.ReadMemStats(&after)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("limit %d: status %d, want 400", limit, rec.Code)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("limit %d: %d bytes declared, 5 sent: the handler allocated %d bytes", limit, req.ContentLength, n)
		}
	}
}

// Bodies of every size around the buffer's growth steps arrive whole.
func TestBodyOfEverySizeArrivesWhole(t *testing.T) {
	for _, n := range []int{1, 4095, 4096, 4097, memoryBody - 1, memoryBody, memoryBody + 1, 3*memoryBody + 7, 5 << 20} {
		body := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		var got []byte
		h := NewHandler(runnerFunc(func(_ context.Context, frame []byte) ([]byte, error) {
			r, err := protocol.DecodeRequest(frame[protocol.HeaderSize:])
			if err != nil {
				t.Fatal(err)
			}
			got = r.Body
			payload, _ := protocol.AppendResponse(nil, 0, &protocol.Response{Status: 200})
			return payload[protocol.HeaderSize:], nil
		}), Options{MaxBodySize: 8 << 20})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/", bytes.NewReader(body)))
		if rec.Code != 200 || !bytes.Equal(got, body) {
			t.Errorf("%d bytes: status %d, %d bytes reached the runner intact: %v", n, rec.Code, len(got), bytes.Equal(got, body))
		}
	}
}

// callFunc is a Runner that hands each call to the function.
type callFunc func(ctx context.Context, c *worker.Call) (int, error)

func (f callFunc) Admit() error { return nil }

func (f callFunc) Do(ctx context.Context, c *worker.Call) (int, error) {
	c.Hold() // as the pool does
	defer c.Drop()
	return f(ctx, c)
}

// serveAndDial serves h on loopback until the test ends, and returns a connection to it.
func serveAndDial(t *testing.T, h http.Handler) net.Conn {
	t.Helper()
	s, err := Listen("127.0.0.1:0", h, ServerOptions{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// records is what an Observer and an access log were told, safe to read while the server runs.
type records struct {
	mu       sync.Mutex
	statuses []int // the Observer's
	log      bytes.Buffer
}

func (o *records) Request(_ string, status int, _ time.Duration, _, _ int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.statuses = append(o.statuses, status)
}

func (o *records) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.log.Write(p)
}

// TestBrokenOffRequestsAreRecordedOnce: every request is in the access log and the metrics
// once, its answer broken off included (review of the HTTP front, items 4 to 6): a worker that
// failed after its answer began (before, such a request was in neither: every event stream
// whose client left, every worker crash mid-stream), and a request whose client left (half
// closed) while it was queued or while its script ran to its end, which is logged 499 and
// answered with nothing, as nginx does (before: an empty 200 for the first, the answer and a
// 200 in the log for the second). A panic of the server's own before any answer is a 500.
func TestBrokenOffRequestsAreRecordedOnce(t *testing.T) {
	waitLeft := func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the client's leaving was not seen")
		}
	}
	for _, tc := range []struct {
		name      string
		halfClose bool
		run       func(ctx context.Context, c *worker.Call) (int, error)
		status    int
		pid       int
		answer    string // what the client gets, to the connection's end
	}{
		{"worker failed after the answer began", false, func(_ context.Context, c *worker.Call) (int, error) {
			_ = c.Answer.Frame(protocol.TypeResponse, protocol.FlagMore|protocol.FlagFlush, responsePayload(t, 200, "data: 1\n\n"))
			return 7, errors.New("worker died mid-stream")
		}, 200, 7, "9\r\ndata: 1\n\n\r\n"},
		{"client left while queued", true, func(ctx context.Context, c *worker.Call) (int, error) {
			if err := waitLeft(ctx); err != nil {
				return 0, err
			}
			return 0, ctx.Err() // as the pool: the request never reached a worker
		}, 499, 0, ""},
		{"client left while its script ran", true, func(ctx context.Context, c *worker.Call) (int, error) {
			if err := waitLeft(ctx); err != nil {
				return 0, err
			}
			// As a sequential worker: the script is not stopped, and answers.
			return 3, c.Answer.Frame(protocol.TypeResponse, 0, responsePayload(t, 200, "the real answer"))
		}, 499, 3, ""},
		{"a bug's panic before any answer", false, func(context.Context, *worker.Call) (int, error) {
			panic("a bug")
		}, 500, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &records{}
			h := NewHandler(callFunc(tc.run), Options{Observer: rec, AccessLog: NewAccessLog(slog.New(slog.NewJSONHandler(rec, nil)))})
			c := serveAndDial(t, h)
			if _, err := io.WriteString(c, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if tc.halfClose {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("the connection did not end: %v (read %q)", err, got)
			}
			switch _, body, _ := strings.Cut(string(got), "\r\n\r\n"); {
			case tc.answer == "" && len(got) > 0:
				t.Errorf("the client got %q; want no answer at all", got)
			case body != tc.answer:
				t.Errorf("the client got %q; want a head and %q, cut short", got, tc.answer)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if !slices.Equal(rec.statuses, []int{tc.status}) {
				t.Errorf("metrics got statuses %v; want [%d]", rec.statuses, tc.status)
			}
			var lines []map[string]any
			for line := range strings.Lines(rec.log.String()) {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("access log line %q: %v", line, err)
				}
				lines = append(lines, m)
			}
			if len(lines) != 1 || lines[0]["status"] != float64(tc.status) || tc.pid != 0 && lines[0]["pid"] != float64(tc.pid) {
				t.Errorf("access log %q; want one record, status %d, pid %d", rec.log.String(), tc.status, tc.pid)
			}
		})
	}
}
