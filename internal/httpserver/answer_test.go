package httpserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/docroot"
	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// frameRunner is a Runner whose worker sends the given frames as the answer.
type frameRunner []testFrame

type testFrame struct {
	t       protocol.Type
	flags   uint16
	payload []byte
}

func (f frameRunner) Admit() error { return nil }

func (f frameRunner) Do(_ context.Context, c *worker.Call) (int, error) {
	c.Hold() // as the pool does: the call's bytes are released once it is done with them
	defer c.Drop()
	for _, fr := range f {
		if err := c.Answer.Frame(fr.t, fr.flags, fr.payload); err != nil {
			return 1, err
		}
	}
	return 1, nil
}

// responsePayload is a RESPONSE payload; headers are name, value pairs.
func responsePayload(t *testing.T, status int, body string, headers ...string) []byte {
	t.Helper()
	r := &protocol.Response{Status: status, Body: []byte(body)}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, protocol.Field{Name: headers[i], Value: headers[i+1]})
	}
	b, err := protocol.AppendResponse(nil, 0, r)
	if err != nil {
		t.Fatal(err)
	}
	return b[protocol.HeaderSize:]
}

// sendfileRoot makes a document root holding report.pdf, a directory outside it holding
// secret.txt, and links from the root to both.
func sendfileRoot(t *testing.T) (root *docroot.Root, dir, outside string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "public")
	outside = filepath.Join(base, "private")
	for _, d := range []string{filepath.Join(dir, ".downloads"), filepath.Join(dir, "files"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(dir, ".downloads", "report.pdf"): "0123456789",
		filepath.Join(outside, "secret.txt"):           "secret",
		filepath.Join(dir, "files", "report.pdf"):      "0123456789",
		filepath.Join(dir, "secret.php"):               "<?php // PHP source",
		filepath.Join(dir, ".env"):                     "DB_PASSWORD=secret",
	}
	for name, content := range files {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(dir, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, ".downloads", "report.pdf"), filepath.Join(outside, "inside.pdf")); err != nil {
		t.Fatal(err)
	}
	root, err := docroot.New(dir, docroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return root, dir, outside
}

func TestSendfilePath(t *testing.T) {
	_, dir, outside := sendfileRoot(t)
	report := filepath.Join(dir, ".downloads", "report.pdf")
	tests := []struct {
		header, value string
		want          string // "" for refused
	}{
		{"X-Sendfile", report, report},
		{"X-Sendfile", dir + "/x/../.downloads/report.pdf", report},
		{"X-Sendfile", dir + "/missing.pdf", dir + "/missing.pdf"}, // 404 from ServeFile
		{"X-Sendfile", outside + "/inside.pdf", report},            // a link into the root
		{"X-Sendfile", filepath.Join(outside, "secret.txt"), ""},
		{"X-Sendfile", dir + "/../private/secret.txt", ""},
		{"X-Sendfile", dir + "/leak.txt", ""}, // a link out of the root
		{"X-Sendfile", dir + "-other/file", ""},
		{"X-Sendfile", outside + "/missing", ""},
		{"X-Sendfile", "relative/report.pdf", ""},
		{"X-Sendfile", "/etc/passwd", ""},
		{"X-Accel-Redirect", "/.downloads/report.pdf", report},
		{"X-Accel-Redirect", "/.downloads/report%2Epdf?token=1", report},
		{"X-Accel-Redirect", "/leak.txt", dir + "/leak.txt"}, // links under the root are followed, as for static files
		{"X-Accel-Redirect", "/../private/secret.txt", ""},
		{"X-Accel-Redirect", "/%2E%2E/private/secret.txt", ""},
		{"X-Accel-Redirect", "/a/%00", ""},
		{"X-Accel-Redirect", "@named", ""},
		{"X-Accel-Redirect", "relative.pdf", ""},
		{"X-Accel-Redirect", "/%zz", ""},
	}
	for _, tt := range tests {
		checkSendfilePath(t, dir, nil, tt.header, tt.value, tt.want)
	}
}

// TestSendfilePathDirs: http.sendfile_dirs, with and without a root.
func TestSendfilePathDirs(t *testing.T) {
	_, dir, outside := sendfileRoot(t)
	report := filepath.Join(dir, ".downloads", "report.pdf")
	secret := filepath.Join(outside, "secret.txt")
	tests := []struct {
		root          string
		header, value string
		want          string // "" for refused
	}{
		{"", "X-Sendfile", secret, secret},
		{"", "X-Sendfile", outside + "/missing", outside + "/missing"},
		{"", "X-Sendfile", report, ""},                  // no root: the root's files are not allowed
		{"", "X-Sendfile", outside + "/inside.pdf", ""}, // a link out of the allowed directory
		{"", "X-Sendfile", outside + "/../public/.downloads/report.pdf", ""},
		{"", "X-Accel-Redirect", "/secret.txt", ""}, // a URI needs a root
		{dir, "X-Sendfile", secret, secret},
		{dir, "X-Sendfile", report, report},
		{dir, "X-Sendfile", outside + "/inside.pdf", report},
		{dir, "X-Sendfile", dir + "/leak.txt", secret}, // a link from the root into an allowed directory
		{dir, "X-Accel-Redirect", "/../private/secret.txt", ""},
	}
	for _, tt := range tests {
		checkSendfilePath(t, tt.root, []string{outside}, tt.header, tt.value, tt.want)
	}
}

func checkSendfilePath(t *testing.T, root string, dirs []string, header, value, want string) {
	t.Helper()
	got, err := sendfilePath(root, dirs, protocol.Field{Name: header, Value: value})
	if want == "" {
		if !errors.Is(err, errSendfileDenied) {
			t.Errorf("root %q: %s: %s: got %q, %v; want it refused", root, header, value, got, err)
		}
		return
	}
	if err != nil || got != want {
		t.Errorf("root %q: %s: %s: got %q, %v; want %q", root, header, value, got, err, want)
	}
}

// TestAccelHeadersStayWithTheServer: nginx's X-Accel-* headers are instructions to the server,
// which nginx never passes to the client; nor does Peregrine.
func TestAccelHeadersStayWithTheServer(t *testing.T) {
	payload := responsePayload(t, 200, "body", "x-accel-buffering", "no", "X-Accel-Expires", "60", "X-Accel-Charset", "utf-8",
		"X-Acceleration", "kept", "X-Custom", "kept")
	h := NewHandler(frameRunner{{protocol.TypeResponse, 0, payload}}, Options{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	got := rec.Header()
	for _, name := range []string{"X-Accel-Buffering", "X-Accel-Expires", "X-Accel-Charset"} {
		if v, ok := got[name]; ok {
			t.Errorf("%s reached the client: %q", name, v)
		}
	}
	if got.Get("X-Acceleration") != "kept" || got.Get("X-Custom") != "kept" || rec.Body.String() != "body" {
		t.Errorf("other headers or the body lost: %v %q", got, rec.Body)
	}
}

func TestSendfileHeaderIsFoundInAnyCase(t *testing.T) {
	for _, name := range []string{"X-Sendfile", "x-sendfile", "X-SENDFILE", "x-accel-redirect", "X-Accel-Redirect"} {
		f := sendfileHeader([]protocol.Field{{Name: "Content-Type", Value: "a/b"}, {Name: name, Value: "/f"}})
		if f.Value != "/f" || !strings.EqualFold(f.Name, name) {
			t.Errorf("%s: %+v", name, f)
		}
	}
	if f := sendfileHeader([]protocol.Field{{Name: "X-Sendfiles", Value: "/f"}, {Name: "Content-Type", Value: "a/b"}}); f.Name != "" {
		t.Errorf("found %+v", f)
	}
}

func TestSendfileAnswers(t *testing.T) {
	root, dir, outside := sendfileRoot(t)
	report := filepath.Join(dir, ".downloads", "report.pdf")
	fi, err := os.Stat(report)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(root *docroot.Root, method string, payload []byte, headers ...string) *httptest.ResponseRecorder {
		t.Helper()
		h := NewHandler(frameRunner{{protocol.TypeResponse, 0, payload}}, Options{Root: root})
		req := httptest.NewRequest(method, "/download", nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	php := responsePayload(t, 200, "PHP's body, never sent", "X-Sendfile", report,
		"Content-Type", "application/x-custom", "Content-Disposition", `attachment; filename="r.pdf"`, "Content-Length", "99")

	rec := serve(root, "GET", php)
	if rec.Code != 200 || rec.Body.String() != "0123456789" {
		t.Fatalf("%d %q", rec.Code, rec.Body)
	}
	if got := rec.Header(); got.Get("Content-Type") != "application/x-custom" || got.Get("Content-Disposition") != `attachment; filename="r.pdf"` ||
		got.Get("X-Sendfile") != "" || got.Get("Content-Length") != "10" || got.Get("Accept-Ranges") != "bytes" {
		t.Fatalf("headers %v", got)
	}
	etag := rec.Header().Get("ETag")
	if etag == "" || rec.Header().Get("Last-Modified") != fi.ModTime().UTC().Format(http.TimeFormat) {
		t.Fatalf("validators %v", rec.Header())
	}

	if rec := serve(root, "GET", php, "Range", "bytes=2-4"); rec.Code != 206 || rec.Body.String() != "234" || rec.Header().Get("Content-Range") != "bytes 2-4/10" {
		t.Fatalf("range: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	if rec := serve(root, "GET", php, "If-None-Match", etag); rec.Code != 304 || rec.Body.Len() != 0 {
		t.Fatalf("If-None-Match: %d %q", rec.Code, rec.Body)
	}
	if rec := serve(root, "POST", php); rec.Code != 200 || rec.Body.String() != "0123456789" {
		t.Fatalf("POST: %d %q", rec.Code, rec.Body)
	}
	if rec := serve(root, "HEAD", php); rec.Code != 200 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != "10" {
		t.Fatalf("HEAD: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	// The status is the file's, as nginx answers an X-Accel-Redirect.
	accel := responsePayload(t, 404, "", "x-accel-redirect", "/files/report.pdf")
	if rec := serve(root, "GET", accel); rec.Code != 200 || rec.Body.String() != "0123456789" || rec.Header().Get("Content-Type") != "application/pdf" {
		t.Fatalf("X-Accel-Redirect: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	missing := responsePayload(t, 200, "", "X-Accel-Redirect", "/files/none.pdf")
	if rec := serve(root, "GET", missing); rec.Code != 404 {
		t.Fatalf("missing file: %d %q", rec.Code, rec.Body)
	}
	for _, p := range [][]byte{
		responsePayload(t, 200, "", "X-Sendfile", filepath.Join(outside, "secret.txt")),
		responsePayload(t, 200, "", "X-Sendfile", dir+"/leak.txt"),
		responsePayload(t, 200, "", "X-Accel-Redirect", "/../private/secret.txt"),
	} {
		if rec := serve(root, "GET", p); rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") {
			t.Fatalf("outside the root: %d %q", rec.Code, rec.Body)
		}
	}
	if rec := serve(nil, "GET", php); rec.Code != 500 || strings.Contains(rec.Body.String(), "0123") {
		t.Fatalf("without a root: %d %q", rec.Code, rec.Body)
	}
	// Without a root, from http.sendfile_dirs: sent, without looking for precompressed siblings.
	h := NewHandler(frameRunner{{protocol.TypeResponse, 0, responsePayload(t, 200, "", "X-Sendfile", filepath.Join(outside, "secret.txt"))}},
		Options{SendfileDirs: []string{outside}})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/download", nil))
	if rec.Code != 200 || rec.Body.String() != "secret" || rec.Header().Get("Content-Type") != "text/plain" {
		t.Fatalf("from http.sendfile_dirs without a root: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	// A flush does not stream an answer that names a file: the file is the body.
	h = NewHandler(frameRunner{
		{protocol.TypeResponse, protocol.FlagMore | protocol.FlagFlush, php},
		{protocol.TypeBody, protocol.FlagFlush, []byte("more of PHP's body")},
	}, Options{Root: root})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/download", nil))
	if rec.Code != 200 || rec.Body.String() != "0123456789" {
		t.Fatalf("flushed: %d %q", rec.Code, rec.Body)
	}
}

// TestAccelRedirectFollowsTheRootsRules (issue 15 item 8): an X-Accel-Redirect path meets the
// document root's rules, as nginx's internal redirect meets its locations: a dot segment,
// percent-encoded or not, answers 403 and PHP source 404, never the file; other files are sent.
func TestAccelRedirectFollowsTheRootsRules(t *testing.T) {
	root, _, _ := sendfileRoot(t)
	tests := []struct {
		uri    string
		status int
	}{
		{"/files/report.pdf", 200},
		{"/files/report%2Epdf?x=1", 200},
		{"/.env", 403},
		{"/%2eenv", 403},
		{"/%2Eenv", 403},
		{"/files//./.env", 403},
		{"/.downloads/report.pdf", 403},
		{"/secret.php", 404},
		{"/SECRET.PHP", 404},
		{"/secret.php/x", 404},
		{"/secret%2ephp", 404},
	}
	for _, tt := range tests {
		h := NewHandler(frameRunner{{protocol.TypeResponse, 0, responsePayload(t, 200, "", "X-Accel-Redirect", tt.uri, "X-Custom", "php")}}, Options{Root: root})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/download", nil))
		body := rec.Body.String()
		if rec.Code != tt.status || strings.Contains(body, "secret") || strings.Contains(body, "<?php") {
			t.Errorf("X-Accel-Redirect: %s: %d %q, want %d", tt.uri, rec.Code, body, tt.status)
		}
		if tt.status == 200 && body != "0123456789" {
			t.Errorf("X-Accel-Redirect: %s: body %q", tt.uri, body)
		}
	}
}

// TestSendfileSiblingIsChecked (issue 15 item 9): the precompressed sibling of an X-Sendfile
// file passes the file's own check: a doc.txt.gz linking out of the allowed directories is
// not sent for Accept-Encoding: gzip, the file itself is; an allowed sibling still is.
func TestSendfileSiblingIsChecked(t *testing.T) {
	_, dir, outside := sendfileRoot(t)
	root, err := docroot.New(dir, docroot.Options{Encodings: []string{"gzip"}})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return name
	}
	doc := write(filepath.Join(dir, "files", "doc.txt"), "the document")
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), doc+".gz"); err != nil {
		t.Fatal(err)
	}
	ok := write(filepath.Join(dir, "files", "ok.txt"), "plain")
	write(ok+".gz", "gzipped")
	send := func(file string) *httptest.ResponseRecorder {
		h := NewHandler(frameRunner{{protocol.TypeResponse, 0, responsePayload(t, 200, "", "X-Sendfile", file)}}, Options{Root: root})
		req := httptest.NewRequest("GET", "/download", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := send(doc); rec.Code != 200 || rec.Body.String() != "the document" || rec.Header().Get("Content-Encoding") != "" {
		t.Errorf("doc.txt with a sibling linking outside: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	if rec := send(doc + ".gz"); rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") {
		t.Errorf("the link named directly: %d %q", rec.Code, rec.Body)
	}
	if rec := send(ok); rec.Body.String() != "gzipped" || rec.Header().Get("Content-Encoding") != "gzip" {
		t.Errorf("an allowed sibling: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
}

// flushRecorder records what had been written at each flush.
type flushRecorder struct {
	*httptest.ResponseRecorder
	flushes []string
}

func (f *flushRecorder) Flush() {
	f.ResponseRecorder.Flush()
	f.flushes = append(f.flushes, f.Body.String())
}

func TestStreamedAnswer(t *testing.T) {
	frames := frameRunner{
		{protocol.TypeResponse, protocol.FlagMore, responsePayload(t, 200, "a", "Content-Type", "text/event-stream")},
		{protocol.TypeBody, protocol.FlagMore | protocol.FlagFlush, []byte("b")},
		{protocol.TypeBody, protocol.FlagMore, []byte("c")},
		{protocol.TypeBody, protocol.FlagMore | protocol.FlagFlush, []byte("")},
		{protocol.TypeBody, 0, []byte("d")},
	}
	rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
	NewHandler(frames, Options{}).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || rec.Body.String() != "abcd" || rec.Header().Get("Content-Length") != "" {
		t.Fatalf("%d %q %v", rec.Code, rec.Body, rec.Header())
	}
	// Collected until the first flush, then every part at once.
	if want := []string{"ab", "abc", "abc", "abcd"}; strings.Join(rec.flushes, ",") != strings.Join(want, ",") {
		t.Fatalf("flushes %q, want %q", rec.flushes, want)
	}
}

func TestStreamedAnswerEndingAtItsFirstFlushHasALength(t *testing.T) {
	rec := httptest.NewRecorder()
	NewHandler(frameRunner{{protocol.TypeResponse, protocol.FlagFlush, responsePayload(t, 200, "all")}}, Options{}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Body.String() != "all" || rec.Header().Get("Content-Length") != "3" {
		t.Fatalf("%q %v", rec.Body, rec.Header())
	}
}

func TestStreamToAClientThatLeftReplacesTheWorker(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("GET", "/events", nil).WithContext(ctx)
	h := NewHandler(nil, Options{})
	a := &answer{w: &countingWriter{ResponseWriter: httptest.NewRecorder()}, r: req, h: h, bufs: &h.bufs}
	defer a.release()
	if err := a.Frame(protocol.TypeResponse, protocol.FlagMore|protocol.FlagFlush, responsePayload(t, 200, "event 1\n")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := a.Frame(protocol.TypeBody, protocol.FlagMore|protocol.FlagFlush, []byte("event 2\n")); !errors.Is(err, errClientGone) {
		t.Fatalf("more after the client left: %v", err)
	}
	// The end of the answer is no reason to replace the worker.
	if err := a.Frame(protocol.TypeBody, 0, nil); err != nil {
		t.Fatal(err)
	}
}

func TestStreamedNoContentIsNotAClientError(t *testing.T) {
	req := httptest.NewRequest("GET", "/", nil)
	h := NewHandler(nil, Options{})
	a := &answer{w: &countingWriter{ResponseWriter: httptest.NewRecorder()}, r: req, h: h, bufs: &h.bufs}
	defer a.release()
	for _, f := range []testFrame{
		{protocol.TypeResponse, protocol.FlagMore | protocol.FlagFlush, responsePayload(t, 204, "")},
		{protocol.TypeBody, protocol.FlagMore | protocol.FlagFlush, []byte("ignored")},
		{protocol.TypeBody, protocol.FlagMore | protocol.FlagFlush, []byte("ignored")},
	} {
		if err := a.Frame(f.t, f.flags, f.payload); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEarlyHints(t *testing.T) {
	srv := httptest.NewServer(NewHandler(frameRunner{
		{protocol.TypeHints, 0, []byte("Link\x00</app.css>; rel=preload; as=style\x00Link\x00</app.js>; rel=preload; as=script")},
		{protocol.TypeResponse, 0, responsePayload(t, 200, "page", "Content-Type", "text/html")},
	}, Options{}))
	defer srv.Close()
	var hints []http.Header
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if code == http.StatusEarlyHints {
				hints = append(hints, http.Header(h).Clone())
			}
			return nil
		},
	}))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if len(hints) != 1 || len(hints[0].Values("Link")) != 2 {
		t.Fatalf("hints %v", hints)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Link") != "" {
		t.Fatalf("final answer %d %v: the hints are not part of it", resp.StatusCode, resp.Header)
	}
}

// TestConnAnswerMemoryIsBounded (issue 15 item 10): the answers of one connection's requests
// hold at most connAnswerMemory in memory together; past it an answer waits in its temporary
// file from its first byte, and memory an answer gave back is used again.
func TestConnAnswerMemoryIsBounded(t *testing.T) {
	h := NewHandler(frameRunner{}, Options{TempDir: t.TempDir()})
	conn := &localAddr{}
	part := make([]byte, memoryAnswer)
	newAnswer := func() *answer {
		a := &answer{h: h, bufs: &h.bufs, conn: conn}
		if err := a.collect(part); err != nil {
			t.Fatal(err)
		}
		return a
	}
	var held []*answer
	for range connAnswerMemory / memoryAnswer {
		a := newAnswer()
		if a.spill != nil {
			t.Fatalf("answer %d spilled within the connection's share", len(held)+1)
		}
		held = append(held, a)
	}
	over := newAnswer()
	if over.spill == nil || over.held != 0 || conn.answerMem.Load() != connAnswerMemory {
		t.Fatalf("past the share: spill %v, held %d, connection %d", over.spill != nil, over.held, conn.answerMem.Load())
	}
	if h.spills.Load() != 1 {
		t.Fatalf("%d answers counted as waiting in files, want 1", h.spills.Load())
	}
	over.release()
	if h.spills.Load() != 0 {
		t.Fatalf("a released spill is still counted: %d", h.spills.Load())
	}
	// With every spill file in use, an answer that fits in memory stays there.
	h.maxSpills = 0
	if inMemory := newAnswer(); inMemory.spill != nil {
		t.Fatal("spilled past maxSpills")
	} else {
		inMemory.release()
	}
	h.maxSpills = maxSpills()
	held[0].release()
	if conn.answerMem.Load() != connAnswerMemory-memoryAnswer {
		t.Fatalf("after a release the connection holds %d", conn.answerMem.Load())
	}
	if again := newAnswer(); again.spill != nil {
		t.Fatal("memory given back was not used again")
	} else {
		again.release()
	}
	for _, a := range held[1:] {
		a.release()
	}
	if n := conn.answerMem.Load(); n != 0 {
		t.Fatalf("all released, the connection still holds %d", n)
	}
	// Without a connection (no ConnContext), no share applies.
	a := &answer{h: h, bufs: &h.bufs}
	for range 8 {
		a = &answer{h: h, bufs: &h.bufs}
		_ = a.collect(part)
		if a.spill != nil {
			t.Fatal("spilled without a connection")
		}
		a.release()
	}
}

// queueRunner answers each request with the next of its frame lists.
type queueRunner struct {
	mu   sync.Mutex
	runs [][]testFrame
}

func (q *queueRunner) Admit() error { return nil }

func (q *queueRunner) Do(ctx context.Context, c *worker.Call) (int, error) {
	q.mu.Lock()
	run := q.runs[0]
	q.runs = q.runs[1:]
	q.mu.Unlock()
	return frameRunner(run).Do(ctx, c)
}

// TestAnswerLengthAndConnectionAsNginx (issue 25 item 26): through the HTTP/1 front, as nginx
// passes PHP-FPM's answers on: HEAD carries the Content-Length the script set, or none, never
// 0; the script's Content-Length survives a flush when the body matches it (no chunks), and a
// body longer than it is cut there without failing the worker; a Connection: close from the
// script does not reach the client, which keeps its connection.
func TestAnswerLengthAndConnectionAsNginx(t *testing.T) {
	more, flush := protocol.FlagMore, protocol.FlagFlush
	for _, tc := range []struct {
		name, method string
		frames       []testFrame
		want, not    []string // in the answer's head and body
	}{
		{"HEAD with the script's length", "HEAD", []testFrame{{protocol.TypeResponse, 0, responsePayload(t, 200, "", "Content-Length", "4615")}},
			[]string{"Content-Length: 4615\r\n"}, []string{"Transfer-Encoding"}},
		{"HEAD without one", "HEAD", []testFrame{{protocol.TypeResponse, 0, responsePayload(t, 200, "")}},
			nil, []string{"Content-Length", "Transfer-Encoding"}},
		{"HEAD whose script wrote its body anyway", "HEAD", []testFrame{{protocol.TypeResponse, 0, responsePayload(t, 200, "hello")}},
			[]string{"Content-Length: 5\r\n"}, []string{"hello"}},
		{"HEAD, flushed, with the script's length", "HEAD", []testFrame{
			{protocol.TypeResponse, more | flush, responsePayload(t, 200, "", "Content-Length", "3744")},
			{protocol.TypeBody, 0, nil}},
			[]string{"Content-Length: 3744\r\n"}, []string{"Transfer-Encoding"}},
		{"flushed with the script's length", "GET", []testFrame{
			{protocol.TypeResponse, more | flush, responsePayload(t, 200, "abc", "Content-Length", "6")},
			{protocol.TypeBody, more | flush, []byte("de")},
			{protocol.TypeBody, 0, []byte("f")}},
			[]string{"Content-Length: 6\r\n", "\r\n\r\nabcdef"}, []string{"Transfer-Encoding"}},
		{"a 206 flushed with the script's length", "GET", []testFrame{
			{protocol.TypeResponse, more | flush, responsePayload(t, 206, "ab", "Content-Length", "2", "Content-Range", "bytes 0-1/10")},
			{protocol.TypeBody, 0, nil}},
			[]string{"206 Partial Content", "Content-Length: 2\r\n", "\r\n\r\nab"}, []string{"Transfer-Encoding"}},
		{"flushed without a length", "GET", []testFrame{
			{protocol.TypeResponse, more | flush, responsePayload(t, 200, "abc")},
			{protocol.TypeBody, 0, []byte("def")}},
			[]string{"Transfer-Encoding: chunked\r\n"}, []string{"Content-Length"}},
		{"Connection: close from the script", "GET", []testFrame{{protocol.TypeResponse, 0, responsePayload(t, 200, "ok", "Connection", "close", "Keep-Alive", "timeout=5")}},
			[]string{"Content-Length: 2\r\n"}, []string{"Connection", "Keep-Alive"}},
		{"Connection: close from a streaming script", "GET", []testFrame{
			{protocol.TypeResponse, more | flush, responsePayload(t, 200, "a", "Connection", "close")},
			{protocol.TypeBody, 0, []byte("b")}},
			[]string{"Transfer-Encoding: chunked\r\n"}, []string{"Connection"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The answer, then a second request on the same connection: kept alive.
			q := &queueRunner{runs: [][]testFrame{tc.frames, {{protocol.TypeResponse, 0, responsePayload(t, 200, "second")}}}}
			c := serveAndDial(t, NewHandler(q, Options{}))
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			_, _ = io.WriteString(c, tc.method+" /x HTTP/1.1\r\nHost: h\r\n\r\n")
			resp, err := http.ReadResponse(br, &http.Request{Method: tc.method})
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			var head strings.Builder
			_ = resp.Header.Write(&head)
			if resp.ContentLength >= 0 {
				fmt.Fprintf(&head, "Content-Length: %d\r\n", resp.ContentLength)
			}
			if len(resp.TransferEncoding) > 0 {
				head.WriteString("Transfer-Encoding: chunked\r\n")
			}
			got := resp.Status + "\r\n" + head.String() + "\r\n\r\n" + string(body)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("no %q in:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("%q in:\n%s", n, got)
				}
			}
			if tc.method == "HEAD" && resp.ContentLength == 0 {
				t.Errorf("HEAD answered with Content-Length: 0")
			}
			_, _ = io.WriteString(c, "GET /2 HTTP/1.1\r\nHost: h\r\n\r\n")
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the connection was not kept: %v", err)
			}
			if b, _ := io.ReadAll(resp.Body); string(b) != "second" {
				t.Fatalf("second answer: %q", b)
			}
		})
	}
}

// TestStreamedBodyLongerThanItsLengthIsCut: a streamed answer longer than the script's
// Content-Length goes out up to it, the rest dropped, and the worker is not blamed.
func TestStreamedBodyLongerThanItsLengthIsCut(t *testing.T) {
	q := &queueRunner{runs: [][]testFrame{{
		{protocol.TypeResponse, protocol.FlagMore | protocol.FlagFlush, responsePayload(t, 200, "ab", "Content-Length", "3")},
		{protocol.TypeBody, protocol.FlagMore | protocol.FlagFlush, []byte("cdef")},
		{protocol.TypeBody, 0, []byte("gh")},
	}}}
	s, err := Listen("127.0.0.1:0", NewHandler(q, Options{}), ServerOptions{ReadHeaderTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	resp, err := http.Get(s.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(b) != "abc" || resp.ContentLength != 3 {
		t.Fatalf("%d bytes declared, %q received", resp.ContentLength, b)
	}
}
