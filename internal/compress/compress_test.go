package compress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// page is a 20 KB HTML page, the size the benchmarks of issue 11 name.
var page = func() string {
	var b strings.Builder
	b.WriteString("<!doctype html><html><head><title>Peregrine</title></head><body><ul>\n")
	for i := 0; b.Len() < 20<<10; i++ {
		b.WriteString(`<li class="item"><a href="/posts/` + strconv.Itoa(i) + `">Post number ` + strconv.Itoa(i) + "</a></li>\n")
	}
	b.WriteString("</ul></body></html>\n")
	return b.String()
}()

func decode(t testing.TB, coding string, body []byte) string {
	t.Helper()
	var r io.Reader
	switch coding {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	case "":
		return string(body)
	default:
		t.Fatalf("unknown coding %q", coding)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", coding, err)
	}
	return string(out)
}

// run serves one request through Compress(h) and returns the recorded response.
func run(h http.HandlerFunc, method string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/", nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	Compress(h, Codings).ServeHTTP(w, req)
	return w
}

func html(body string, extra ...string) http.HandlerFunc {
	b := []byte(body)
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		for i := 0; i+1 < len(extra); i += 2 {
			w.Header().Set(extra[i], extra[i+1])
		}
		_, _ = w.Write(b)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, coding := range []string{"zstd", "br", "gzip"} {
		t.Run(coding, func(t *testing.T) {
			for _, cl := range []bool{false, true} {
				h := func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/html")
					w.Header().Set("ETag", `"v1"`)
					w.Header().Set("Accept-Ranges", "bytes")
					if cl {
						w.Header().Set("Content-Length", strconv.Itoa(len(page)))
					}
					// In pieces, as a worker's answer arrives.
					for i := 0; i < len(page); i += 1000 {
						_, _ = io.WriteString(w, page[i:min(i+1000, len(page))])
					}
				}
				w := run(h, "GET", "Accept-Encoding", coding)
				hd := w.Result().Header
				if hd.Get("Content-Encoding") != coding || hd.Get("Vary") != "Accept-Encoding" ||
					hd.Get("Content-Length") != "" || hd.Get("Accept-Ranges") != "" || hd.Get("ETag") != `W/"v1"` {
					t.Errorf("headers (Content-Length set: %v): %v", cl, hd)
				}
				if got := decode(t, coding, w.Body.Bytes()); got != page {
					t.Errorf("round trip: %d bytes back, want %d", len(got), len(page))
				}
				if w.Body.Len() > len(page)/3 {
					t.Errorf("%d bytes compressed to %d", len(page), w.Body.Len())
				}
			}
		})
	}
}

func TestNegotiate(t *testing.T) {
	all := []string{"zstd", "br", "gzip"}
	tests := []struct {
		header string
		want   string
	}{
		{"", ""},
		{"gzip", "gzip"},
		{"x-gzip", "gzip"},
		{"GZIP", "gzip"},
		{"gzip, deflate, br", "br"},
		{"gzip, deflate, br, zstd", "zstd"},
		{"br;q=1.0, gzip;q=0.8, *;q=0.1", "br"},
		{"gzip;q=1, br;q=0.9", "gzip"},
		{"zstd;q=0.5, br;q=0.5, gzip;q=0.5", "zstd"},
		{"*", "zstd"},
		{"*;q=0.5, zstd;q=0", "br"},
		{"identity", ""},
		{"identity, *;q=0", ""},
		{"gzip;q=0", ""},
		{"gzip;q=abc, br", "br"},
		{"gzip;q=2", ""},
		{"deflate, compress", ""},
		{" gzip ; q=0.3 , br ; q = 0.2 ", "gzip"},
		{"br;level=4", "br"},
	}
	for _, tt := range tests {
		if got := Negotiate(tt.header, all); got != tt.want {
			t.Errorf("Negotiate(%q) = %q, want %q", tt.header, got, tt.want)
		}
	}
	if got := Negotiate("br, zstd", []string{"gzip"}); got != "" {
		t.Errorf("nothing offered accepted: %q", got)
	}
	if got := Negotiate("gzip, br", []string{"gzip", "br"}); got != "gzip" {
		t.Errorf("server order among equals: %q", got)
	}
}

func TestUntouched(t *testing.T) {
	big := page
	tests := []struct {
		name   string
		h      http.HandlerFunc
		method string
		vary   bool
	}{
		{"small", html("<p>hello</p>"), "GET", false},
		{"small with Content-Length", html("<p>hello</p>", "Content-Length", "12"), "GET", false},
		{"already encoded", html(big, "Content-Encoding", "gzip"), "GET", false},
		{"no-transform", html(big, "Cache-Control", "public, no-transform"), "GET", false},
		{"image", html(big, "Content-Type", "image/png"), "GET", false},
		{"content range", html(big, "Content-Range", "bytes 0-9/100"), "GET", false},
		{"HEAD", html(big), "HEAD", false},
		{"206", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(206)
			_, _ = io.WriteString(w, big)
		}, "GET", false},
		{"304", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("ETag", `"x"`)
			w.WriteHeader(304)
		}, "GET", false},
		{"204", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }, "GET", false},
		{"empty", func(w http.ResponseWriter, r *http.Request) {}, "GET", false},
		{"identity only", html(big), "GET", true},
	}
	for _, tt := range tests {
		accept := "gzip, br, zstd"
		if tt.name == "identity only" {
			accept = "identity"
		}
		want := httptest.NewRecorder()
		tt.h(want, httptest.NewRequest(tt.method, "/", nil))
		got := run(tt.h, tt.method, "Accept-Encoding", accept)
		if got.Code != want.Code || got.Body.String() != want.Body.String() {
			t.Errorf("%s: %d %d bytes, want %d %d bytes", tt.name, got.Code, got.Body.Len(), want.Code, want.Body.Len())
		}
		if ce := got.Result().Header.Get("Content-Encoding"); ce != want.Result().Header.Get("Content-Encoding") {
			t.Errorf("%s: Content-Encoding %q", tt.name, ce)
		}
		if vary := got.Result().Header.Get("Vary") != ""; vary != tt.vary {
			t.Errorf("%s: Vary %q", tt.name, got.Result().Header.Get("Vary"))
		}
		if et := got.Result().Header.Get("ETag"); strings.HasPrefix(et, "W/") {
			t.Errorf("%s: ETag weakened to %q", tt.name, et)
		}
	}
}

func TestSniff(t *testing.T) {
	w := run(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		_, _ = io.WriteString(w, page)
	}, "GET", "Accept-Encoding", "gzip")
	h := w.Result().Header
	if w.Code != 201 || h.Get("Content-Encoding") != "gzip" || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Errorf("sniffed: %d %v", w.Code, h)
	}
	if decode(t, "gzip", w.Body.Bytes()) != page {
		t.Error("sniffed body differs")
	}
}

func TestVaryKept(t *testing.T) {
	w := run(html(page, "Vary", "Cookie"), "GET", "Accept-Encoding", "br")
	if got := w.Result().Header.Values("Vary"); len(got) != 1 || got[0] != "Cookie, Accept-Encoding" {
		t.Errorf("Vary %q, want one line \"Cookie, Accept-Encoding\"", got)
	}
	w = run(html(page, "Vary", "accept-encoding"), "GET", "Accept-Encoding", "br")
	if got := w.Result().Header.Values("Vary"); len(got) != 1 {
		t.Errorf("Vary repeated: %q", got)
	}
}

func TestAddVary(t *testing.T) {
	tests := []struct {
		have []string
		want []string
	}{
		{nil, []string{"Accept-Encoding"}},
		{[]string{"Cookie"}, []string{"Cookie, Accept-Encoding"}},
		{[]string{"Cookie, Origin"}, []string{"Cookie, Origin, Accept-Encoding"}},
		{[]string{"Cookie", "Origin"}, []string{"Cookie", "Origin, Accept-Encoding"}},
		{[]string{"Origin, accept-encoding"}, []string{"Origin, accept-encoding"}},
		{[]string{"*"}, []string{"*"}},
		{[]string{""}, []string{"Accept-Encoding"}},
		{[]string{"Cookie,"}, []string{"Cookie, Accept-Encoding"}},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.have != nil {
			h["Vary"] = append([]string(nil), tt.have...)
		}
		AddVary(h, "Accept-Encoding")
		if !slices.Equal(h["Vary"], tt.want) {
			t.Errorf("AddVary(%q) = %q, want %q", tt.have, h["Vary"], tt.want)
		}
	}
}

func TestInformational(t *testing.T) {
	srv := httptest.NewServer(Compress(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, page)
	}), Codings))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
	resp, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(resp, []byte("HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\n")) ||
		!bytes.Contains(resp, []byte("Content-Encoding: gzip\r\n")) {
		t.Errorf("response:\n%s", resp[:min(len(resp), 300)])
	}
}

// TestFlush checks that a flushed part reaches the client, decodable, while the handler still
// holds the rest back; with ResponseController too.
func TestFlush(t *testing.T) {
	for _, coding := range Codings {
		t.Run(coding, func(t *testing.T) {
			next := make(chan struct{})
			srv := httptest.NewServer(Compress(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: one\n\n")
				if err := http.NewResponseController(w).Flush(); err != nil {
					t.Error(err)
				}
				if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
					t.Errorf("ResponseController through Unwrap: %v", err)
				}
				<-next
				_, _ = io.WriteString(w, "data: two\n\n")
				w.(http.Flusher).Flush()
			}), Codings))
			defer srv.Close()
			defer close(next)
			req, _ := http.NewRequest("GET", srv.URL, nil)
			req.Header.Set("Accept-Encoding", coding)
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.Header.Get("Content-Encoding") != coding {
				t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
			}
			var r io.Reader
			switch coding {
			case "gzip":
				zr, err := gzip.NewReader(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				r = zr
			case "br":
				r = brotli.NewReader(resp.Body)
			case "zstd":
				zr, err := zstd.NewReader(resp.Body, zstd.WithDecoderConcurrency(1))
				if err != nil {
					t.Fatal(err)
				}
				defer zr.Close()
				r = zr
			}
			line, err := bufio.NewReader(r).ReadString('\n')
			if err != nil || line != "data: one\n" {
				t.Fatalf("first event before the handler went on: %q %v", line, err)
			}
		})
	}
}

// rf is a ResponseWriter that records whether ReadFrom, which is sendfile in net/http, was used.
type rf struct {
	*httptest.ResponseRecorder
	readFrom bool
}

func (w *rf) ReadFrom(r io.Reader) (int64, error) {
	w.readFrom = true
	return io.Copy(w.ResponseRecorder, r)
}

func TestReadFromPassesThrough(t *testing.T) {
	h := Compress(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Content-Length", strconv.Itoa(len(page)))
		_, _ = io.Copy(w, struct{ io.Reader }{strings.NewReader(page)}) // as io.CopyN in ServeContent
	}), Codings)
	w := &rf{ResponseRecorder: httptest.NewRecorder()}
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	h.ServeHTTP(w, req)
	if !w.readFrom || w.Body.String() != page {
		t.Errorf("ReadFrom used: %v, %d bytes", w.readFrom, w.Body.Len())
	}
	// Compressed, through ReadFrom as well.
	w = &rf{ResponseRecorder: httptest.NewRecorder()}
	h = Compress(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.Copy(w, strings.NewReader(page))
	}), Codings)
	h.ServeHTTP(w, req)
	if decode(t, "gzip", w.Body.Bytes()) != page {
		t.Error("compressed through ReadFrom: body differs")
	}
}

func TestCompressOff(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	if got := Compress(h, nil); got == nil {
		t.Fatal("nil handler")
	}
	if _, wrapped := Compress(h, []string{"lzma"}).(*handler); wrapped {
		t.Error("no known coding, yet wrapped")
	}
}

func BenchmarkCompress(b *testing.B) {
	for _, coding := range Codings {
		b.Run(coding, func(b *testing.B) {
			h := Compress(html(page), Codings)
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("Accept-Encoding", coding)
			w := &discard{h: http.Header{}}
			b.SetBytes(int64(len(page)))
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.n = 0
				h.ServeHTTP(w, req)
			}
			b.ReportMetric(float64(w.n), "bytes/op-out")
		})
	}
}

type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header { return d.h }
func (d *discard) WriteHeader(int)     {}
func (d *discard) Write(p []byte) (int, error) {
	d.n += len(p)
	return len(p), nil
}

// TestEmptyCompressed: a response that announced a large body and wrote none still decodes.
func TestEmptyCompressed(t *testing.T) {
	for _, coding := range Codings {
		w := run(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Length", "5000")
			w.WriteHeader(200)
		}, "GET", "Accept-Encoding", coding)
		if w.Result().Header.Get("Content-Encoding") != coding {
			t.Fatalf("%s: not compressed", coding)
		}
		if got := decode(t, coding, w.Body.Bytes()); got != "" {
			t.Errorf("%s: %q", coding, got)
		}
	}
}

// TestConcurrent shares the pooled encoders between parallel responses (run with -race).
func TestConcurrent(t *testing.T) {
	h := Compress(html(page), Codings)
	done := make(chan error)
	for g := 0; g < 6; g++ {
		go func() {
			var err error
			for i := 0; i < 20 && err == nil; i++ {
				coding := Codings[(g+i)%len(Codings)]
				req := httptest.NewRequest("GET", "/", nil)
				req.Header.Set("Accept-Encoding", coding)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Result().Header.Get("Content-Encoding") != coding || decode(t, coding, w.Body.Bytes()) != page {
					err = io.ErrUnexpectedEOF
				}
			}
			done <- err
		}()
	}
	for g := 0; g < 6; g++ {
		if err := <-done; err != nil {
			t.Error("a response did not round-trip")
		}
	}
}
