package docroot

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree makes a document root like the one the expected values below were taken from.
func tree(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"index.php":          "<?php",
		"a.php":              "<?php",
		"sub/index.php":      "<?php",
		"deep/b.php":         "<?php",
		"A.PHP":              "<?php",
		"x.php.bak":          "<?php",
		"noidx/x.txt":        "x",
		"html/index.html":    "<p>hi</p>",
		"style.css":          "body{}",
		"style.css.gz":       "gz",
		"dir.php/s.txt":      "s",
		".env":               "secret",
		".git/config":        "g",
		".well-known/x.txt":  "wk",
		"phpidx/index.php/x": "index.php is a directory here",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestResolve compares Resolve with nginx. The expected values were taken on 2026-11-23 from
// nginx 1.22.1 (Debian 12's nginx-light) in front of php8.2-fpm, configured exactly as in
// Resolve's doc comment (root and index as here, Debian's snippets/fastcgi-php.conf), with curl
// --path-as-is against the same tree and a PHP script printing $_SERVER. The rows marked
// "differs" are where Peregrine deliberately answers otherwise.
func TestResolve(t *testing.T) {
	dir := tree(t)
	r, err := New(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	script := func(name, info string) Target {
		return Target{Kind: Script, File: dir + name, URI: name, ScriptName: name, PathInfo: info}
	}
	static := func(uri string) Target { return Target{Kind: Static, File: dir + uri, URI: uri} }
	tests := []struct {
		path string
		want Target
	}{
		{"/", script("/index.php", "")},
		{"", script("/index.php", "")},
		{"/index.php", script("/index.php", "")},
		{"/a.php", script("/a.php", "")},
		{"/a.php/extra", script("/a.php", "/extra")},
		{"/a.php/extra/more", script("/a.php", "/extra/more")},
		{"/a.php/", script("/a.php", "/")},
		{"/deep/b.php", script("/deep/b.php", "")},
		{"/deep/b.php/p.php/q", script("/deep/b.php", "/p.php/q")},
		{"/sub/index.php/", script("/sub/index.php", "/")},
		{"/missing.php", Target{Kind: NotFound, URI: "/missing.php"}},
		{"/missing.php/x", Target{Kind: NotFound, URI: "/missing.php/x"}},
		{"/a.phpx/b.php", Target{Kind: NotFound, URI: "/a.phpx/b.php"}},
		{"/dir.php", Target{Kind: NotFound, URI: "/dir.php"}},
		{"/dir.php/", Target{Kind: NotFound, URI: "/dir.php/"}},
		{"/dir.php/s.txt", Target{Kind: NotFound, URI: "/dir.php/s.txt"}},
		{"/nothing", script("/index.php", "")},
		{"/nothing/deep", script("/index.php", "")},
		{"/style.css/", script("/index.php", "")},
		{"/sub", Target{Kind: Redirect, URI: "/sub/"}},
		{"/sub/", script("/sub/index.php", "")},
		{"/noidx", Target{Kind: Redirect, URI: "/noidx/"}},
		{"/noidx/", Target{Kind: Forbidden, URI: "/noidx/"}},
		{"/noidx/x.txt", static("/noidx/x.txt")},
		{"/html/", static("/html/index.html")},
		{"/phpidx/", Target{Kind: NotFound, URI: "/phpidx/index.php"}},
		{"/style.css", static("/style.css")},
		{"/style.css.gz", static("/style.css.gz")},
		{"/x.php.bak", static("/x.php.bak")},
		{"/A.PHP", Target{Kind: NotFound, URI: "/A.PHP"}}, // differs: nginx sends the source
		{"/.env", Target{Kind: Forbidden, URI: "/.env"}},
		{"/.git/config", Target{Kind: Forbidden, URI: "/.git/config"}},
		{"/x/.hidden", Target{Kind: Forbidden, URI: "/x/.hidden"}},
		{"/sub/.env.php", Target{Kind: Forbidden, URI: "/sub/.env.php"}},
		{"/.well-known/x.txt", static("/.well-known/x.txt")},
		{"/.well-known/none", script("/index.php", "")},
		{"/.well-known/.x", Target{Kind: Forbidden, URI: "/.well-known/.x"}},
		{"/.well-known", Target{Kind: Forbidden, URI: "/.well-known"}},
		{"/sub/.well-known/x", script("/index.php", "")},
		// Normalization: the decoded path as net/http gives it (%2e%2e is "..", %2F is "/").
		{"/sub/../a.php", script("/a.php", "")},
		{"/../a.php", Target{Kind: BadRequest}},
		{"/sub/../../a.php", Target{Kind: BadRequest}},
		{"/sub/index.php", script("/sub/index.php", "")},
		{"//a.php", script("/a.php", "")},
		{"/./a.php", script("/a.php", "")},
		{"/sub/.", script("/sub/index.php", "")},
		{"/sub/..", script("/index.php", "")},
		{"/a.php\x00.css", Target{Kind: BadRequest}},
	}
	for _, tt := range tests {
		if got := r.Resolve(tt.path); got != tt.want {
			t.Errorf("Resolve(%q)\n got %+v\nwant %+v", tt.path, got, tt.want)
		}
	}
}

func TestResolveIndex(t *testing.T) {
	dir := tree(t)
	if err := os.WriteFile(filepath.Join(dir, "sub", "app.php"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := New(dir, Options{Index: "sub/app.php"})
	if err != nil {
		t.Fatal(err)
	}
	want := Target{Kind: Script, File: dir + "/sub/app.php", URI: "/sub/app.php", ScriptName: "/sub/app.php"}
	if got := r.Resolve("/anything"); got != want {
		t.Errorf("front controller: got %+v, want %+v", got, want)
	}
	if got := r.Resolve("/sub/"); got != want {
		t.Errorf("directory index: got %+v, want %+v", got, want)
	}
	// Without the front controller, a path naming nothing is 404, as nginx's try_files gives.
	r, _ = New(dir, Options{Index: "front.php"})
	if got := r.Resolve("/anything"); got.Kind != NotFound {
		t.Errorf("missing front controller: got %+v, want NotFound", got)
	}
}

func TestResolveWorker(t *testing.T) {
	dir := tree(t)
	r, err := New(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	worker := func(uri string) Target { return Target{Kind: Worker, URI: uri} }
	tests := []struct {
		path string
		want Target
	}{
		{"/", worker("/")},
		{"/style.css", Target{Kind: Static, File: dir + "/style.css", URI: "/style.css"}},
		{"/style.css/", worker("/style.css/")},
		{"/a.php", worker("/a.php")},
		{"/a.php/x", worker("/a.php/x")},
		{"/A.PHP", worker("/A.PHP")},
		{"/sub", worker("/sub")},
		{"/noidx/", worker("/noidx/")},
		{"/html/", worker("/html/")},
		{"/.env", worker("/.env")},
		{"/.well-known/x.txt", Target{Kind: Static, File: dir + "/.well-known/x.txt", URI: "/.well-known/x.txt"}},
		{"/users/42", worker("/users/42")},
		{"/../etc/passwd", Target{Kind: BadRequest}},
	}
	for _, tt := range tests {
		if got := r.ResolveWorker(tt.path); got != tt.want {
			t.Errorf("ResolveWorker(%q)\n got %+v\nwant %+v", tt.path, got, tt.want)
		}
	}
}

func TestResolveSymlinks(t *testing.T) {
	dir := tree(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "lib.js"), []byte("js"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "lib.js"), filepath.Join(dir, "lib.js")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "vendor")); err != nil {
		t.Fatal(err)
	}
	r, _ := New(dir, Options{})
	for _, p := range []string{"/lib.js", "/vendor/lib.js"} {
		if got := r.Resolve(p); got.Kind != Static {
			t.Errorf("Resolve(%q) = %+v, want the file behind the link served", p, got)
		}
	}
}

func TestClean(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"/", "/", true}, {"", "/", true}, {"/a/b", "/a/b", true}, {"/a/b/", "/a/b/", true},
		{"a/b", "/a/b", true}, {"//a///b//", "/a/b/", true}, {"/a/./b", "/a/b", true},
		{"/a/.", "/a/", true}, {"/a/b/..", "/a/", true}, {"/a/b/../c", "/a/c", true},
		{"/a/../..", "", false}, {"/..", "", false}, {"/a\x00", "", false}, {"/a..b/..c", "/a..b/..c", true},
		{"/.", "/", true}, {"/a/..", "/", true},
	}
	for _, tt := range tests {
		got, ok := clean(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("clean(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParams(t *testing.T) {
	dir := tree(t)
	r, _ := New(dir, Options{})
	// As php8.2-fpm saw them behind nginx for GET /a.php/extra?z=1 (see TestResolve), less what
	// the REQUEST frame carries in fields of its own and PHP_SELF, which PHP builds.
	got := r.Params(r.Resolve("/a.php/extra"), "example.test")
	want := []Param{
		{"SCRIPT_FILENAME", dir + "/a.php"},
		{"SCRIPT_NAME", "/a.php"},
		{"PATH_INFO", "/extra"},
		{"DOCUMENT_ROOT", dir},
		{"DOCUMENT_URI", "/a.php"},
		{"SERVER_NAME", "example.test"},
		{"REDIRECT_STATUS", "200"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Params:\n got %v\nwant %v", got, want)
	}
	got = r.Params(r.Resolve("/blog/2024/hello?x=1"), "h")
	if !slices.Contains(got, Param{"PATH_INFO", ""}) || !slices.Contains(got, Param{"SCRIPT_NAME", "/index.php"}) ||
		!slices.Contains(got, Param{"DOCUMENT_URI", "/index.php"}) {
		t.Errorf("front controller: %v", got)
	}
	if got := r.Params(r.ResolveWorker("/x"), "h"); !slices.Equal(got, []Param{{"DOCUMENT_ROOT", dir}, {"SERVER_NAME", "h"}}) {
		t.Errorf("worker params: %v", got)
	}
	if got := r.Params(r.Resolve("/style.css"), "h"); got != nil {
		t.Errorf("static params: %v", got)
	}
}

func TestNew(t *testing.T) {
	dir := tree(t)
	if _, err := New(filepath.Join(dir, "style.css"), Options{}); err == nil {
		t.Error("New on a file: no error")
	}
	if _, err := New(filepath.Join(dir, "none"), Options{}); !os.IsNotExist(err) {
		t.Errorf("New on a missing directory: %v", err)
	}
	r, err := New(dir+"/sub/..", Options{Encodings: []string{"gzip", "lzma", "br"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Dir() != dir || !slices.Equal(r.encodings, []string{"gzip", "br"}) {
		t.Errorf("Dir %q encodings %v", r.Dir(), r.encodings)
	}
}

func BenchmarkResolve(b *testing.B) {
	dir := tree(b)
	r, _ := New(dir, Options{})
	for _, p := range []string{"/style.css", "/blog/2024/hello-world"} {
		b.Run(p, func(b *testing.B) {
			for b.Loop() {
				r.Resolve(p)
			}
		})
	}
}

// TestResolveNginx replays what nginx 1.22.1 and php8.2-fpm answered, configured as in Resolve's
// doc comment, for 3000 paths made of the tree's names, dot segments and encoded characters
// (testdata/nginx/record.py made answers.tsv, and can make it again). Resolve must route every
// one of them the same way, but for PHP source under another case (A.PHP), which nginx sends as
// text and Peregrine refuses.
func TestResolveNginx(t *testing.T) {
	data, err := os.ReadFile("testdata/nginx/answers.tsv")
	if err != nil {
		t.Fatal(err)
	}
	dir := tree(t)
	r, err := New(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		u, err := url.ParseRequestURI(f[0]) // as net/http parses the request line
		if err != nil {
			t.Fatalf("%q: %v", f[0], err)
		}
		got := r.Resolve(u.Path)
		rows++
		var ok bool
		switch {
		case len(f) == 6 && f[2] == "script":
			ok = got.Kind == Script && got.ScriptName == f[3] && got.PathInfo == f[4] && got.URI == f[5] &&
				got.File == dir+f[3]
		case len(f) == 4 && f[2] == "file" && strings.HasPrefix(f[3], "SOURCE:"):
			ok = got.Kind == Static && strings.HasSuffix(got.File, ".php.bak") ||
				got.Kind == NotFound && phpSource(got.URI) // the one deliberate difference
		case len(f) == 4 && f[2] == "file":
			ok = got.Kind == Static && got.File == dir+"/"+f[3]
		case len(f) == 4 && f[2] == "redirect":
			ok = got.Kind == Redirect && got.URI == f[3]
		case f[1] == "403":
			ok = got.Kind == Forbidden
		case f[1] == "404":
			ok = got.Kind == NotFound
		case f[1] == "400":
			ok = got.Kind == BadRequest
		default:
			t.Fatalf("unreadable answer %q", line)
		}
		if !ok {
			t.Errorf("%s (decoded %q): nginx answered %q, Resolve gives %+v", f[0], u.Path, f[1:], got)
		}
	}
	if rows < 3000 {
		t.Errorf("%d answers read, want 3000", rows)
	}
}

// TestResolveFile: X-Accel-Redirect's paths follow the root's rules as nginx's internal
// redirect does: dot segments 403, scripts and PHP source never sent, ".." above the root 400.
func TestResolveFile(t *testing.T) {
	dir := tree(t)
	r, _ := New(dir, Options{})
	tests := []struct {
		path string
		kind Kind
	}{
		{"/style.css", Static},
		{"/none.txt", Static}, // ServeFile answers 404
		{"/noidx/../style.css", Static},
		{"/.well-known/x.txt", Static},
		{"/.env", Forbidden},
		{"/.git/config", Forbidden},
		{"/sub/../.env", Forbidden},
		{"/a.php", NotFound},
		{"/A.PHP", NotFound},
		{"/a.php/extra", NotFound},
		{"/dir.php/s.txt", NotFound},
		{"/x.phtml", NotFound},
		{"/x.php.bak", Static},
		{"/../etc/passwd", BadRequest},
		{"/a\x00", BadRequest},
	}
	for _, tt := range tests {
		got := r.ResolveFile(tt.path)
		if got.Kind != tt.kind {
			t.Errorf("ResolveFile(%q) = %v, want %v", tt.path, got.Kind, tt.kind)
		}
		if tt.kind == Static && got.File != filepath.Join(dir, filepath.Clean(tt.path)) {
			t.Errorf("ResolveFile(%q).File = %q", tt.path, got.File)
		}
	}
}
