package httpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// runnerFunc adapts a function to Runner, to put the handler in front of chosen outcomes: it
// gets the whole REQUEST frame, body included, and returns the RESPONSE payload or an error.
type runnerFunc func(ctx context.Context, frame []byte) ([]byte, error)

func (f runnerFunc) Admit() error { return nil }

func (f runnerFunc) Do(ctx context.Context, c *worker.Call) (int, error) {
	frame := c.Frame
	if c.Body != nil {
		rest, err := io.ReadAll(c.Body)
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

func TestFailPropagatesCancellation(t *testing.T) {
	h := NewHandler(runnerFunc(func(context.Context, []byte) ([]byte, error) { return nil, context.Canceled }), Options{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Body.Len() != 0 {
		t.Fatalf("answered a client that left: %q", rec.Body)
	}
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
