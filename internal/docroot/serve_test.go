package docroot

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func serve(r *Root, method, target string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	r.Serve(w, req, r.Resolve(req.URL.Path))
	return w
}

func TestServeStatic(t *testing.T) {
	dir := tree(t)
	body := strings.Repeat("body{color:red}\n", 100)
	css := filepath.Join(dir, "site.css")
	if err := os.WriteFile(css, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(css, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	r, _ := New(dir, Options{})

	w := serve(r, "GET", "/site.css")
	h := w.Result().Header
	etag := `"` + strconv.FormatInt(mtime.Unix(), 16) + "-" + strconv.FormatInt(int64(len(body)), 16) + `"`
	switch {
	case w.Code != 200 || w.Body.String() != body:
		t.Fatalf("GET: %d %q", w.Code, w.Body.String()[:20])
	case h.Get("Content-Type") != "text/css":
		t.Errorf("Content-Type %q", h.Get("Content-Type"))
	case h.Get("ETag") != etag:
		t.Errorf("ETag %q, want %q", h.Get("ETag"), etag)
	case h.Get("Last-Modified") != "Fri, 02 Jan 2026 03:04:05 GMT":
		t.Errorf("Last-Modified %q", h.Get("Last-Modified"))
	case h.Get("Vary") != "":
		t.Errorf("Vary %q without siblings", h.Get("Vary"))
	}

	if w := serve(r, "GET", "/site.css", "If-None-Match", etag); w.Code != 304 || w.Body.Len() != 0 {
		t.Errorf("If-None-Match: %d", w.Code)
	}
	if w := serve(r, "GET", "/site.css", "If-None-Match", "W/"+etag); w.Code != 304 {
		t.Errorf("If-None-Match with the weak tag a compressed answer carries: %d", w.Code)
	}
	if w := serve(r, "GET", "/site.css", "If-Modified-Since", "Fri, 02 Jan 2026 03:04:05 GMT"); w.Code != 304 {
		t.Errorf("If-Modified-Since: %d", w.Code)
	}
	if w := serve(r, "GET", "/site.css", "If-Modified-Since", "Thu, 01 Jan 2026 00:00:00 GMT"); w.Code != 200 {
		t.Errorf("If-Modified-Since older: %d", w.Code)
	}
	w = serve(r, "GET", "/site.css", "Range", "bytes=16-31")
	if w.Code != 206 || w.Body.String() != "body{color:red}\n" || w.Result().Header.Get("Content-Range") != "bytes 16-31/1600" {
		t.Errorf("Range: %d %q %q", w.Code, w.Body.String(), w.Result().Header.Get("Content-Range"))
	}
	if w := serve(r, "GET", "/site.css", "Range", "bytes=5000-"); w.Code != 416 {
		t.Errorf("unsatisfiable Range: %d", w.Code)
	}
	// The last zero bytes are no range (issue 25 item 14): 416, as nginx, not an empty 206.
	for _, rng := range []string{"bytes=-0", "bytes=-000", "bytes=-0, -0"} {
		if w := serve(r, "GET", "/site.css", "Range", rng); w.Code != 416 || w.Result().Header.Get("Content-Range") != "bytes */1600" {
			t.Errorf("%s: %d %q", rng, w.Code, w.Result().Header.Get("Content-Range"))
		}
	}
	for rng, want := range map[string]int{"bytes=-1": 206, "bytes=-0, 0-0": 206, "bytes=-10": 206} {
		if w := serve(r, "GET", "/site.css", "Range", rng); w.Code != want {
			t.Errorf("%s: %d, want %d", rng, w.Code, want)
		}
	}
	if w := serve(r, "GET", "/site.css", "Range", "bytes=-0", "If-Range", `"other"`); w.Code != 200 {
		t.Errorf("bytes=-0 with an If-Range mismatch: %d", w.Code)
	}
	if w := serve(r, "GET", "/site.css", "Range", "bytes=0-1", "If-Range", `"other"`); w.Code != 200 {
		t.Errorf("If-Range mismatch: %d", w.Code)
	}
	if w := serve(r, "HEAD", "/site.css"); w.Code != 200 || w.Body.Len() != 0 || w.Result().Header.Get("Content-Length") != "1600" {
		t.Errorf("HEAD: %d %d %q", w.Code, w.Body.Len(), w.Result().Header.Get("Content-Length"))
	}
	if w := serve(r, "POST", "/site.css"); w.Code != 405 || w.Result().Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d %q", w.Code, w.Result().Header.Get("Allow"))
	}
	if w := serve(r, "GET", "/noidx/x.txt"); w.Result().Header.Get("Content-Type") != "text/plain" {
		t.Errorf("txt Content-Type %q", w.Result().Header.Get("Content-Type"))
	}
}

func TestServeAnswers(t *testing.T) {
	r, _ := New(tree(t), Options{})
	tests := []struct {
		target   string
		code     int
		location string
	}{
		{"/sub?a=1&b=%20", 301, "/sub/?a=1&b=%20"},
		{"/noidx", 301, "/noidx/"},
		{"/noidx/", 403, ""},
		{"/.env", 403, ""},
		{"/missing.php", 404, ""},
		{"/A.PHP", 404, ""},
		{"/x/../../etc/passwd", 400, ""},
	}
	for _, tt := range tests {
		req := httptest.NewRequest("GET", "/", nil)
		req.URL.RawQuery = ""
		if p, q, ok := strings.Cut(tt.target, "?"); ok {
			req.URL.Path, req.URL.RawQuery = p, q
		} else {
			req.URL.Path = p
		}
		w := httptest.NewRecorder()
		r.Serve(w, req, r.Resolve(req.URL.Path))
		if w.Code != tt.code || w.Result().Header.Get("Location") != tt.location {
			t.Errorf("%s: %d %q, want %d %q", tt.target, w.Code, w.Result().Header.Get("Location"), tt.code, tt.location)
		}
	}
	w := httptest.NewRecorder()
	r.Serve(w, httptest.NewRequest("GET", "/", nil), r.Resolve("/a.php"))
	if w.Code != 500 {
		t.Errorf("a script target served: %d, want 500", w.Code)
	}
}

func TestServePrecompressed(t *testing.T) {
	dir := tree(t)
	js := filepath.Join(dir, "app.js")
	for name, body := range map[string]string{"": "plain", ".br": "BR", ".gz": "GZ"} {
		if err := os.WriteFile(js+name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := New(dir, Options{Encodings: []string{"zstd", "br", "gzip"}})
	plainTag := serve(r, "GET", "/app.js").Result().Header.Get("ETag")
	tests := []struct {
		accept, body, coding string
	}{
		{"", "plain", ""},
		{"gzip", "GZ", "gzip"},
		{"gzip, br", "BR", "br"},
		{"br;q=0.5, gzip", "GZ", "gzip"},
		{"zstd", "plain", ""}, // no .zst sibling
		{"*", "BR", "br"},
		{"br;q=0, gzip;q=0", "plain", ""},
		{"identity", "plain", ""},
	}
	for _, tt := range tests {
		w := serve(r, "GET", "/app.js", "Accept-Encoding", tt.accept)
		h := w.Result().Header
		if w.Body.String() != tt.body || h.Get("Content-Encoding") != tt.coding ||
			h.Get("Vary") != "Accept-Encoding" || h.Get("Content-Type") != "text/javascript" {
			t.Errorf("Accept-Encoding %q: body %q coding %q vary %q type %q", tt.accept,
				w.Body.String(), h.Get("Content-Encoding"), h.Get("Vary"), h.Get("Content-Type"))
		}
		if tt.coding != "" && h.Get("ETag") == plainTag {
			t.Errorf("Accept-Encoding %q: the sibling has the plain file's ETag", tt.accept)
		}
	}
	// The sibling served with a range: ranges apply to the bytes sent, as with nginx's gzip_static.
	if w := serve(r, "GET", "/app.js", "Accept-Encoding", "gzip", "Range", "bytes=1-"); w.Code != 206 || w.Body.String() != "Z" {
		t.Errorf("Range over a sibling: %d %q", w.Code, w.Body.String())
	}
	// A sibling that appears is served once the lookup is older than siblingTTL.
	r.siblingTTL = time.Hour
	if err := os.WriteFile(js+".zst", []byte("ZST"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w := serve(r, "GET", "/app.js", "Accept-Encoding", "zstd"); w.Body.String() != "plain" {
		t.Errorf("a sibling looked up within the TTL: %q", w.Body.String())
	}
	r.siblingTTL = 0
	if w := serve(r, "GET", "/app.js", "Accept-Encoding", "zstd"); w.Body.String() != "ZST" {
		t.Errorf("a sibling looked up again: %q", w.Body.String())
	}
	// Without Encodings, no sibling is looked for.
	r, _ = New(dir, Options{})
	if w := serve(r, "GET", "/app.js", "Accept-Encoding", "br"); w.Body.String() != "plain" || w.Result().Header.Get("Vary") != "" {
		t.Errorf("siblings off: %q vary %q", w.Body.String(), w.Result().Header.Get("Vary"))
	}
}

func TestContentType(t *testing.T) {
	for name, want := range map[string]string{
		"a.html": "text/html", "A.CSS": "text/css", "x.js": "text/javascript", "x.mjs": "text/javascript",
		"x.json": "application/json", "x.svg": "image/svg+xml", "x.wasm": "application/wasm",
		"x.woff2": "font/woff2", "x.png": "image/png", "x.webp": "image/webp", "x.unknown": defaultType,
		"noext": defaultType, "x.pdf": "application/pdf", "x.mp4": "video/mp4",
	} {
		if got := contentType(name); got != want {
			t.Errorf("contentType(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestServeUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every file")
	}
	dir := tree(t)
	if err := os.Chmod(filepath.Join(dir, "style.css"), 0); err != nil {
		t.Fatal(err)
	}
	r, _ := New(dir, Options{})
	if w := serve(r, "GET", "/style.css"); w.Code != http.StatusForbidden {
		t.Errorf("unreadable file: %d, want 403 as nginx", w.Code)
	}
}

// BenchmarkServeStatic measures what the server spends on a static file besides the network:
// routing, the sibling lookups, the open-file cache and the headers.
func BenchmarkServeStatic(b *testing.B) {
	dir := tree(b)
	r, _ := New(dir, Options{Encodings: []string{"zstd", "br", "gzip"}})
	for _, p := range []string{"/style.css", "/noidx/x.txt"} {
		b.Run(p, func(b *testing.B) {
			req := httptest.NewRequest("GET", p, nil)
			req.Header.Set("Accept-Encoding", "gzip, br")
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				r.Serve(w, req, r.Resolve(req.URL.Path))
			}
		})
	}
}

func TestServeFile(t *testing.T) {
	dir := tree(t)
	r, _ := New(dir, Options{})
	// Any method, as nginx sends an X-Accel-Redirect file; the caller's Content-Type is kept.
	req := httptest.NewRequest("POST", "/download", nil)
	w := httptest.NewRecorder()
	w.Header().Set("Content-Type", "application/pdf")
	w.Header().Set("Content-Disposition", "attachment")
	r.ServeFile(w, req, filepath.Join(dir, "noidx", "x.txt"), nil)
	h := w.Result().Header
	if w.Code != 200 || w.Body.String() != "x" || h.Get("Content-Type") != "application/pdf" ||
		h.Get("Content-Disposition") != "attachment" || h.Get("ETag") == "" {
		t.Errorf("ServeFile: %d %q %v", w.Code, w.Body.String(), h)
	}
	req = httptest.NewRequest("GET", "/download", nil)
	req.Header.Set("Range", "bytes=0-0")
	w = httptest.NewRecorder()
	r.ServeFile(w, req, filepath.Join(dir, "style.css"), nil)
	if w.Code != 206 || w.Body.String() != "b" || w.Result().Header.Get("Content-Type") != "text/css" {
		t.Errorf("ServeFile with a range: %d %q", w.Code, w.Body.String())
	}
	req.Header.Set("Range", "bytes=-0") // an X-Sendfile answer too
	w = httptest.NewRecorder()
	r.ServeFile(w, req, filepath.Join(dir, "style.css"), nil)
	if w.Code != 416 {
		t.Errorf("ServeFile with bytes=-0: %d", w.Code)
	}
	for _, file := range []string{filepath.Join(dir, "none"), filepath.Join(dir, "sub")} {
		w = httptest.NewRecorder()
		r.ServeFile(w, httptest.NewRequest("GET", "/", nil), file, nil)
		if w.Code != 404 {
			t.Errorf("ServeFile(%q): %d, want 404", file, w.Code)
		}
	}
}

// TestServeFileSiblingMustBeAllowed: a precompressed sibling the caller's check refuses (an
// X-Sendfile sibling linking out of the allowed directories) is never sent in place of the file,
// and then the answer does not vary by Accept-Encoding either.
func TestServeFileSiblingMustBeAllowed(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	doc := filepath.Join(dir, "doc.txt")
	if err := os.WriteFile(doc, []byte("the allowed file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), doc+".gz"); err != nil {
		t.Fatal(err)
	}
	r, _ := New(dir, Options{Encodings: []string{"gzip"}})
	send := func(allow func(string) bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/download", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		w := httptest.NewRecorder()
		r.ServeFile(w, req, doc, allow)
		return w
	}
	var asked []string
	w := send(func(p string) bool { asked = append(asked, p); return false })
	if w.Body.String() != "the allowed file" || w.Header().Get("Content-Encoding") != "" || w.Header().Get("Vary") != "" {
		t.Errorf("refused sibling: %q %v", w.Body.String(), w.Header())
	}
	if len(asked) != 1 || asked[0] != doc+".gz" {
		t.Errorf("the check was asked about %q, want the sibling", asked)
	}
	if w := send(func(string) bool { return true }); w.Body.String() != "secret outside" || w.Header().Get("Content-Encoding") != "gzip" {
		t.Errorf("allowed sibling: %q %v", w.Body.String(), w.Header())
	}
}
