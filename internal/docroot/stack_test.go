package docroot

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peregrinephp/peregrine/internal/compress"
)

// TestBehindCompress serves files through compress.Compress over a real connection, as the
// server does: a precompressed sibling is never compressed again, a file compressed on the fly
// carries a weak ETag that still validates, and ranges are left alone.
func TestBehindCompress(t *testing.T) {
	dir := tree(t)
	css := strings.Repeat("body { color: red; margin: 0 auto; }\n", 200)
	for name, body := range map[string]string{"big.css": css, "app.js": "plain", "app.js.br": "BR"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	codings := []string{"zstd", "br", "gzip"}
	root, err := New(dir, Options{Encodings: codings})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(compress.Compress(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		root.Serve(w, r, root.Resolve(r.URL.Path))
	}), codings))
	defer srv.Close()
	plain := &http.Transport{DisableCompression: true} // sends Accept-Encoding as given, decodes nothing
	defer plain.CloseIdleConnections()
	get := func(path string, header ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := plain.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	resp, body := get("/app.js", "Accept-Encoding", "br, gzip")
	if resp.Header.Get("Content-Encoding") != "br" || body != "BR" || resp.Header.Values("Vary")[0] != "Accept-Encoding" || len(resp.Header.Values("Vary")) != 1 {
		t.Errorf("sibling: %q %q vary %q", resp.Header.Get("Content-Encoding"), body, resp.Header.Values("Vary"))
	}

	resp, body = get("/big.css", "Accept-Encoding", "gzip")
	etag := resp.Header.Get("ETag")
	if resp.Header.Get("Content-Encoding") != "gzip" || !strings.HasPrefix(etag, `W/"`) || len(body) >= len(css) {
		t.Errorf("on the fly: %q etag %q, %d bytes", resp.Header.Get("Content-Encoding"), etag, len(body))
	}
	if resp, _ := get("/big.css", "Accept-Encoding", "gzip", "If-None-Match", etag); resp.StatusCode != 304 {
		t.Errorf("If-None-Match with the weak tag: %d", resp.StatusCode)
	}
	resp, body = get("/big.css", "Accept-Encoding", "gzip", "Range", "bytes=0-3")
	if resp.StatusCode != 206 || body != "body" || resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("range: %d %q %q", resp.StatusCode, body, resp.Header.Get("Content-Encoding"))
	}
	resp, body = get("/big.css")
	if resp.Header.Get("Content-Encoding") != "" || body != css || resp.Header.Get("Vary") != "Accept-Encoding" ||
		resp.Header.Get("Content-Length") != "7400" {
		t.Errorf("identity: %q, %d bytes, vary %q, length %q", resp.Header.Get("Content-Encoding"), len(body),
			resp.Header.Get("Vary"), resp.Header.Get("Content-Length"))
	}
}
