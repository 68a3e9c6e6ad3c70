package docroot

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// expire makes every entry of r's open-file cache older than its ttl, as if a second passed.
func expire(t *testing.T, r *Root) {
	t.Helper()
	r.files.mu.Lock()
	for _, e := range r.files.entries {
		e.checked = time.Time{}
	}
	r.files.mu.Unlock()
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(fds)
}

// closeCache drops every entry of r's cache, closing the descriptors it holds.
func closeCache(r *Root) {
	r.files.mu.Lock()
	for _, e := range r.files.entries {
		r.files.drop(e)
	}
	r.files.mu.Unlock()
}

// TestFileCacheFreshness: a file changed under the cache is served as it was until the entry's
// ttl passed, and as it is now at the first request after.
func TestFileCacheFreshness(t *testing.T) {
	tests := []struct {
		name    string
		change  func(t *testing.T, file string)
		inPlace bool   // the same inode: within the ttl its new bytes may show
		code    int    // the answer once the ttl passed, in classic mode (worker mode: 418, the worker's, for no file)
		body    string // its body, for a 200
	}{
		{"rewritten in place", func(t *testing.T, file string) {
			if err := os.WriteFile(file, []byte("new and longer"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true, 200, "new and longer"},
		{"replaced by a rename", func(t *testing.T, file string) {
			tmp := file + ".tmp"
			if err := os.WriteFile(tmp, []byte("renamed"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, file); err != nil {
				t.Fatal(err)
			}
		}, false, 200, "renamed"},
		{"same size, other time", func(t *testing.T, file string) {
			if err := os.WriteFile(file, []byte("NEW"), 0o644); err != nil {
				t.Fatal(err)
			}
			mt := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
			if err := os.Chtimes(file, mt, mt); err != nil {
				t.Fatal(err)
			}
		}, true, 200, "NEW"},
		{"deleted", func(t *testing.T, file string) {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
		}, false, 404, ""},
		{"replaced by a directory", func(t *testing.T, file string) {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(file, 0o755); err != nil {
				t.Fatal(err)
			}
		}, false, 301, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "f.txt")
			if err := os.WriteFile(file, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, classic := range []bool{true, false} {
				r, _ := New(dir, Options{})
				t.Cleanup(func() { closeCache(r) })
				r.files.ttl = time.Hour
				get := func() *httptest.ResponseRecorder {
					req := httptest.NewRequest("GET", "/f.txt", nil)
					w := httptest.NewRecorder()
					if classic {
						r.Serve(w, req, r.Resolve(req.URL.Path))
					} else if tg := r.ResolveWorker(req.URL.Path); tg.Kind == Static {
						r.Serve(w, req, tg)
					} else {
						w.WriteHeader(http.StatusTeapot) // the worker's
					}
					return w
				}
				if w := get(); w.Code != 200 || w.Body.String() != "old" {
					t.Fatalf("first answer: %d %q", w.Code, w.Body.String())
				}
				tt.change(t, file)
				if !tt.inPlace {
					if w := get(); w.Code != 200 || w.Body.String() != "old" {
						t.Errorf("within the ttl: %d %q, want the file as it was", w.Code, w.Body.String())
					}
				}
				expire(t, r)
				want := tt.code
				if want != 200 && !classic {
					want = http.StatusTeapot // no file: the worker's
				}
				if w := get(); w.Code != want || want == 200 && w.Body.String() != tt.body {
					t.Errorf("classic %t, after the ttl: %d %q, want %d %q", classic, w.Code, w.Body.String(), want, tt.body)
				}
				// Undo the change for the other mode.
				os.RemoveAll(file)
				if err := os.WriteFile(file, []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestFileCacheDescriptors: the descriptors the cache holds stay under its bounds however many
// files are served, and all are closed once the entries expire and the sweep runs; a deleted
// file's descriptor among them.
func TestFileCacheDescriptors(t *testing.T) {
	dir := t.TempDir()
	r, _ := New(dir, Options{})
	t.Cleanup(func() { closeCache(r) })
	r.files.ttl = time.Hour
	files := r.files.maxIdle + 44
	for i := range files {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)+".txt"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := openFDs(t)
	for i := range files {
		if w := serve(r, "GET", "/"+strconv.Itoa(i)+".txt"); w.Code != 200 {
			t.Fatalf("file %d: %d", i, w.Code)
		}
	}
	if n := openFDs(t) - before; n > r.files.maxIdle {
		t.Errorf("%d files served: %d descriptors held, want at most %d", files, n, r.files.maxIdle)
	}

	// Many requests at once for one file: each has its own descriptor, and at most
	// maxIdlePerFile stay.
	closeCache(r)
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.Serve(w, req, r.Resolve(req.URL.Path))
	}))
	t.Cleanup(srv.Close)
	var wg sync.WaitGroup
	for range 2 * maxIdlePerFile {
		wg.Go(func() {
			resp, err := http.Get(srv.URL + "/big.bin")
			if err != nil {
				t.Error(err)
				return
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n != 1<<20 {
				t.Errorf("a concurrent answer had %d bytes", n)
			}
		})
	}
	wg.Wait()
	r.files.mu.Lock()
	idle := len(r.files.entries[big].idle)
	r.files.mu.Unlock()
	if idle > maxIdlePerFile {
		t.Errorf("%d idle descriptors for one file, want at most %d", idle, maxIdlePerFile)
	}
	srv.CloseClientConnections()
	http.DefaultClient.CloseIdleConnections()

	// Deleted, then expired: the sweep closes what is left.
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	before = openFDs(t)
	expire(t, r)
	r.files.sweep()
	if n := before - openFDs(t); n < idle {
		t.Errorf("the sweep closed %d descriptors, want the %d idle", n, idle)
	}
	r.files.mu.Lock()
	left, sweeping := len(r.files.entries), r.files.sweeping
	r.files.mu.Unlock()
	if left != 0 || sweeping {
		t.Errorf("after the sweep: %d entries, sweeping %t", left, sweeping)
	}
}

// TestFileCacheOffsets: a descriptor reused from the cache is read from where each answer
// starts, whether the last answer moved its offset by sendfile, by read, or not at all, over a
// real connection (sendfile) and into a recorder (read).
func TestFileCacheOffsets(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 2000 {
		b.WriteString(strconv.Itoa(i % 10))
	}
	body := b.String()
	if err := os.WriteFile(filepath.Join(dir, "d.txt"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r, _ := New(dir, Options{})
	t.Cleanup(func() { closeCache(r) })
	r.files.ttl = time.Hour
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.Serve(w, req, r.Resolve(req.URL.Path))
	}))
	t.Cleanup(srv.Close)
	steps := []struct {
		rng  string // Range header
		code int
		want string
	}{
		{"", 200, body},
		{"bytes=10-19", 206, body[10:20]},
		{"", 200, body},
		{"bytes=-5", 206, body[len(body)-5:]},
		{"bytes=1990-", 206, body[1990:]},
		{"bytes=0-0,5-6", 206, ""}, // multipart: checked for its parts below
		{"", 200, body},
	}
	for _, via := range []string{"connection", "recorder"} {
		for i, s := range steps {
			var code int
			var got string
			if via == "connection" {
				req, _ := http.NewRequest("GET", srv.URL+"/d.txt", nil)
				if s.rng != "" {
					req.Header.Set("Range", s.rng)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				code, got = resp.StatusCode, string(data)
			} else {
				var w *httptest.ResponseRecorder
				if s.rng != "" {
					w = serve(r, "GET", "/d.txt", "Range", s.rng)
				} else {
					w = serve(r, "GET", "/d.txt")
				}
				code, got = w.Code, w.Body.String()
			}
			if s.want == "" {
				if code != 206 || !strings.Contains(got, "\r\n\r\n0\r\n") || !strings.Contains(got, "\r\n\r\n56\r\n") {
					t.Errorf("%s, step %d (%s): %d %q", via, i, s.rng, code, got)
				}
				continue
			}
			if code != s.code || got != s.want {
				t.Errorf("%s, step %d (%s): %d, %d bytes starting %.12q, want %d, %d bytes starting %.12q",
					via, i, s.rng, code, len(got), got, s.code, len(s.want), s.want)
			}
		}
	}
}

// TestServeLikeServeContent: the answer made without http.ServeContent, for a request with no
// validator and no Range, has exactly the headers and body ServeContent gives.
func TestServeLikeServeContent(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"page.html": strings.Repeat("<p>x</p>", 300), "empty.txt": "", "app.js": "plain", "app.js.gz": "GZ"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	epoch := filepath.Join(dir, "epoch.txt")
	if err := os.WriteFile(epoch, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(epoch, time.Unix(0, 0), time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	r, _ := New(dir, Options{Encodings: []string{"gzip"}})
	t.Cleanup(func() { closeCache(r) })
	tests := []struct {
		method, path, accept, file, coding string
	}{
		{"GET", "/page.html", "", "page.html", ""},
		{"HEAD", "/page.html", "", "page.html", ""},
		{"GET", "/empty.txt", "", "empty.txt", ""},
		{"GET", "/epoch.txt", "", "epoch.txt", ""},
		{"GET", "/app.js", "gzip", "app.js.gz", "gzip"},
	}
	for _, tt := range tests {
		for range 2 { // opened, then from the cache
			got := serve(r, tt.method, tt.path, "Accept-Encoding", tt.accept)

			want := httptest.NewRecorder()
			req := httptest.NewRequest(tt.method, tt.path, nil)
			f, err := os.Open(filepath.Join(dir, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := f.Stat()
			h := want.Header()
			if tt.coding != "" {
				h.Set("Vary", "Accept-Encoding")
				h.Set("Content-Encoding", tt.coding)
			}
			h.Set("Content-Type", contentType(tt.path))
			h.Set("ETag", etag(fi))
			http.ServeContent(want, req, "", fi.ModTime(), f)
			f.Close()

			if got.Code != want.Code || got.Body.String() != want.Body.String() {
				t.Errorf("%s %s: %d %q, ServeContent %d %q", tt.method, tt.path, got.Code, got.Body.String(), want.Code, want.Body.String())
			}
			for k := range mergeKeys(got.Header(), want.Header()) {
				if g, w := got.Header()[k], want.Header()[k]; strings.Join(g, "\n") != strings.Join(w, "\n") {
					t.Errorf("%s %s: %s %q, ServeContent %q", tt.method, tt.path, k, g, w)
				}
			}
		}
	}
}

func mergeKeys(a, b http.Header) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

// TestFileCacheOutOfDescriptors: when the process may open no more descriptors, the idle ones
// are closed so that the file asked for is still served.
func TestFileCacheOutOfDescriptors(t *testing.T) {
	dir := t.TempDir()
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)+".txt"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := New(dir, Options{})
	t.Cleanup(func() { closeCache(r) })
	r.files.ttl = time.Hour
	for i := range 19 {
		if w := serve(r, "GET", "/"+strconv.Itoa(i)+".txt"); w.Code != 200 {
			t.Fatalf("file %d: %d", i, w.Code)
		}
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	// Every descriptor number up to the highest open one is taken: no new one fits.
	fds, _ := os.ReadDir("/proc/self/fd")
	highest := 0
	for _, fd := range fds {
		if n, err := strconv.Atoi(fd.Name()); err == nil && n > highest {
			highest = n
		}
	}
	lim := syscall.Rlimit{Cur: uint64(highest + 1), Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	// Fill the free numbers below it.
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		t.Cleanup(func() { f.Close() })
	}
	w := serve(r, "GET", "/19.txt")
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	if w.Code != 200 || w.Body.String() != "x" {
		t.Errorf("out of descriptors: %d %q, want the file", w.Code, w.Body.String())
	}
}

// TestFileCacheContents: a small file's bytes are kept with its entry (the empty file and one
// past smallFile are not), within maxContent in all (files past the budget are still served,
// from their descriptor), and given back when the entries go; bytes that changed between the
// open and the read are not kept.
func TestFileCacheContents(t *testing.T) {
	dir := t.TempDir()
	r, _ := New(dir, Options{})
	t.Cleanup(func() { closeCache(r) })
	r.files.ttl = time.Hour
	fill := func(n, seed int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + (i*7+seed)%26)
		}
		return b
	}
	for _, tc := range []struct {
		size int
		kept bool
	}{{0, false}, {1, true}, {4 << 10, true}, {smallFile, true}, {smallFile + 1, false}} {
		name := "s" + strconv.Itoa(tc.size) + ".txt"
		want := fill(tc.size, tc.size)
		if err := os.WriteFile(filepath.Join(dir, name), want, 0o644); err != nil {
			t.Fatal(err)
		}
		for range 2 { // made, then from the cache
			if w := serve(r, "GET", "/"+name); w.Code != 200 || w.Body.String() != string(want) {
				t.Fatalf("%s: %d, %d bytes, want the file's %d", name, w.Code, w.Body.Len(), len(want))
			}
		}
		r.files.mu.Lock()
		e := r.files.entries[filepath.Join(dir, name)]
		kept := e != nil && e.content != nil
		r.files.mu.Unlock()
		if kept != tc.kept {
			t.Errorf("%s: contents kept %t, want %t", name, kept, tc.kept)
		}
	}
	closeCache(r)

	files := maxContent/smallFile + 3
	for i := range files {
		if err := os.WriteFile(filepath.Join(dir, "b"+strconv.Itoa(i)), fill(smallFile, i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		for i := range files {
			if w := serve(r, "GET", "/b"+strconv.Itoa(i)); w.Body.String() != string(fill(smallFile, i)) {
				t.Fatalf("b%d: %d, %d bytes: not the file", i, w.Code, w.Body.Len())
			}
		}
	}
	r.files.mu.Lock()
	held, kept := r.files.content, 0
	for _, e := range r.files.entries {
		kept += len(e.content)
	}
	r.files.mu.Unlock()
	if held != kept || held > maxContent || held < maxContent-smallFile {
		t.Errorf("%d bytes held by the count, %d by the entries, want the same, within %d and at most %d short", held, kept, maxContent, smallFile)
	}
	closeCache(r)
	if r.files.content != 0 {
		t.Errorf("%d bytes still counted after every entry was dropped", r.files.content)
	}

	for _, change := range []func(path string) error{
		func(path string) error { // written in place, same size
			return os.WriteFile(path, fill(100, 1), 0o644)
		},
		func(path string) error { return os.Truncate(path, 50) },
	} {
		path := filepath.Join(dir, "c.txt")
		if err := os.WriteFile(path, fill(100, 0), 0o644); err != nil {
			t.Fatal(err)
		}
		f, fi, err := openRegular(path)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := idOf(fi)
		time.Sleep(10 * time.Millisecond) // a later modification time, on any file system clock
		if err := change(path); err != nil {
			t.Fatal(err)
		}
		if b := readWhole(f, fi.Size(), id); b != nil {
			t.Errorf("a file changed after its fstat: %d bytes kept, want none", len(b))
		}
		f.Close()
	}
}
