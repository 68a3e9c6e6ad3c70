package integration

// Streamed answers, 103 Early Hints and X-Sendfile end to end (issue 11, items 4 to 6), on both
// runtimes where PHP's side differs: server-sent events from a raw-mode generator and from an
// unseekable PSR-7 stream, flush() in a classic-mode script, a client that leaves mid-stream,
// early hints read off a raw socket, and files named with X-Sendfile and X-Accel-Redirect.
//
// A stream in testdata/workers/streaming.php makes its next part only once the test has created
// a signal file, and the test creates it only after it has read the part before: a server that
// held the answer back would leave the test waiting for a part that is never made. No assertion
// depends on timing.

import (
	"bufio"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// streamingServer runs testdata/workers/streaming.php with one worker on runtime; mode "psr"
// serves PSR-7, "" raw mode. extra is YAML put before the workers section.
func streamingServer(t *testing.T, runtime, mode, extra string) *server {
	t.Helper()
	cmd := "php " + fixture(t, "streaming.php")
	if mode != "" {
		cmd += " " + mode
	}
	return startServer(t, extra+"workers:\n  command: "+cmd+"\n  runtime: "+runtime+"\n  count: 1\n")
}

// signal creates the file that lets the worker make its next part.
func signal(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// eventStream is a server-sent events client: it reads events as they arrive.
type eventStream struct {
	resp *http.Response
	r    *bufio.Reader
}

// h2c is a client that speaks HTTP/2 with prior knowledge over cleartext.
var h2c = &http.Client{Transport: &http.Transport{Protocols: protocols(false, false, true)}}

// openEvents sends GET url with c (nil: a new HTTP/1.1 connection) and checks that an event
// stream begins; every read must end within 30 seconds.
func openEvents(t *testing.T, c *http.Client, url string, headers ...string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if c == nil {
		c = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	// PHP adds its default_charset to a text type under the native runtime, as under PHP-FPM.
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || resp.ContentLength != -1 {
		t.Fatalf("GET %s: %d %v, length %d; want a 200 event stream of unknown length", url, resp.StatusCode, resp.Header, resp.ContentLength)
	}
	return &eventStream{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next reads the next event and returns its fields ("id: 1" -> id=1); io.EOF at the end.
func (e *eventStream) next() (map[string]string, error) {
	ev := map[string]string{}
	for {
		line, err := e.r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && len(ev) == 0 {
				return nil, io.EOF
			}
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			return ev, nil
		}
		name, value, _ := strings.Cut(line, ":")
		ev[name] = strings.TrimPrefix(value, " ")
	}
}

// readEvents reads n events, signalling go-(i+1) once event i has arrived, then the end.
func readEvents(t *testing.T, e *eventStream, dir string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		ev, err := e.next()
		if err != nil {
			t.Fatalf("event %d: %v (got %v so far)", i, err, ev)
		}
		if ev["id"] != strconv.Itoa(i) || ev["data"] != "event "+strconv.Itoa(i) {
			t.Fatalf("event %d: %v", i, ev)
		}
		if i < n {
			signal(t, dir, "go-"+strconv.Itoa(i+1)) // only now may the worker make the next one
		}
	}
	if ev, err := e.next(); err != io.EOF {
		t.Fatalf("after the last event: %v %v, want the end of the stream", ev, err)
	}
}

func TestServerSentEvents(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ runtime, mode string }{{"cli", ""}, {"native", ""}, {"cli", "psr"}, {"native", "psr"}} {
		t.Run(tt.runtime+" "+tt.mode, func(t *testing.T) {
			s := streamingServer(t, tt.runtime, tt.mode, "")
			for _, v := range []struct {
				client *http.Client
				enc    string // a compressed stream is flushed as well
			}{{nil, "identity"}, {nil, "gzip"}, {h2c, "identity"}} {
				enc := v.enc
				dir := t.TempDir()
				e := openEvents(t, v.client, s.URL+"/events?n=4&dir="+url.QueryEscape(dir), "Accept-Encoding", enc)
				if got := e.resp.Header.Get("Content-Encoding"); enc == "gzip" && got != "gzip" || enc == "identity" && got != "" {
					t.Fatalf("%s: Content-Encoding %q", enc, got)
				}
				if v.client == h2c && e.resp.ProtoMajor != 2 {
					t.Fatalf("h2c: %s", e.resp.Proto)
				}
				if enc == "gzip" {
					e.r = gunzipStream(t, e.resp.Body)
				}
				readEvents(t, e, dir, 4)
			}
			// The worker is free for the next request.
			if r := get(t, s.URL+"/pid"); r.Status != 200 {
				t.Fatalf("after the streams: %d", r.Status)
			}
		})
	}
}

func TestClientLeavingMidStreamReplacesTheWorker(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		runtime string
		client  *http.Client // HTTP/2 resets the stream rather than closing the connection
	}{{"cli", nil}, {"native", nil}, {"cli", h2c}} {
		name := tt.runtime
		if tt.client == h2c {
			name += " h2c"
		}
		t.Run(name, func(t *testing.T) {
			s := streamingServer(t, tt.runtime, "", "")
			pid := string(get(t, s.URL+"/pid").Body)
			dir := t.TempDir()
			e := openEvents(t, tt.client, s.URL+"/events?n=1000000&dir="+url.QueryEscape(dir), "Accept-Encoding", "identity")
			if ev, err := e.next(); err != nil || ev["data"] != "event 1" {
				t.Fatalf("first event: %v %v", ev, err)
			}
			e.resp.Body.Close() // the client leaves, the stream would go on for good
			signal(t, dir, "all")
			s.log.waitFor(t, "client left during a streamed answer", 30*time.Second)
			r := get(t, s.URL+"/pid") // one worker: this needs the slot the stream held
			if r.Status != 200 || string(r.Body) == pid {
				t.Fatalf("after the client left: %d, pid %s (was %s)", r.Status, r.Body, pid)
			}
			if s.log.count("panic") > 0 || s.log.count("DATA RACE") > 0 {
				t.Fatalf("server log:\n%s", s.log.String())
			}
		})
	}
}

// rawExchange sends a GET for path over a new connection with the given protocol version and
// returns everything the server sent until it closed the connection.
func rawExchange(t *testing.T, base, path, proto string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" "+proto+"\r\nHost: localhost\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the answer: %v (got %q)", err, b)
	}
	return string(b)
}

// splitHeads splits a raw exchange into its heads (an informational answer, then the final
// one) and the body.
func splitHeads(raw string) (heads []string, body string) {
	for strings.HasPrefix(raw, "HTTP/") {
		head, rest, _ := strings.Cut(raw, "\r\n\r\n")
		heads = append(heads, head)
		raw = rest
		if !strings.Contains(strings.SplitN(head, "\r\n", 2)[0], " 1") {
			break // a final status
		}
	}
	return heads, raw
}

func TestEarlyHints(t *testing.T) {
	t.Parallel()
	for _, runtime := range []string{"cli", "native"} {
		t.Run(runtime, func(t *testing.T) {
			s := streamingServer(t, runtime, "", "")
			heads, _ := splitHeads(rawExchange(t, s.URL, "/hints", "HTTP/1.1"))
			if len(heads) != 2 || !strings.HasPrefix(heads[0], "HTTP/1.1 103 Early Hints\r\n") || !strings.HasPrefix(heads[1], "HTTP/1.1 200 OK\r\n") {
				t.Fatalf("heads %q, want a 103 then a 200", heads)
			}
			if !strings.Contains(heads[0], "\r\nLink: </style.css>; rel=preload; as=style\r\nLink: </app.js>; rel=preload; as=script") {
				t.Fatalf("103 without the links: %q", heads[0])
			}
			if strings.Contains(heads[1], "Link:") || !strings.Contains(heads[1], "X-Hints-Sent: yes") {
				t.Fatalf("final answer: %q", heads[1])
			}
			// Never to an HTTP/1.0 client, which would take the 103 for the answer.
			heads, body := splitHeads(rawExchange(t, s.URL, "/hints", "HTTP/1.0"))
			if len(heads) != 1 || !strings.Contains(heads[0], " 200 OK\r\n") || body != "page" {
				t.Fatalf("HTTP/1.0: %q %q", heads, body)
			}
		})
	}
}

// classicRoot makes a document root for classic mode with the scripts the native runtime's own
// functions are tested with, and a file under .private, which is never served as it is.
func classicRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	autoload := strconv.Quote(filepath.Join(repoRoot(t), "php", "autoload.php"))
	files := map[string]string{
		"flush.php": `<?php
header('Content-Type: text/plain');
echo "first\n";
if (ob_get_level() > 0) { ob_flush(); }
flush();
$deadline = microtime(true) + 20;
while (!file_exists($_GET['dir'] . '/go-2') && microtime(true) < $deadline) { usleep(2000); }
echo "second\n";
`,
		"hints.php": `<?php
require ` + autoload + `;
header('X-Before: kept');
setcookie('c', 'v');
http_response_code(201);
Peregrine\Http\earlyHints(['Link' => '</style.css>; rel=preload; as=style']);
echo 'page';
`,
		"sendfile.php": `<?php
header('X-Sendfile: ' . __DIR__ . '/.private/report.csv');
header('Content-Type: text/csv');
echo 'not this';
`,
		".private/report.csv": "a,b\n1,2\n",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestNativeClassicStreamingHintsAndSendfile(t *testing.T) {
	t.Parallel()
	root := classicRoot(t)
	s := startServer(t, "http:\n  root: "+root+"\nworkers:\n  runtime: native\n  count: 1\n")

	t.Run("flush", func(t *testing.T) {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/flush.php?dir="+url.QueryEscape(dir), nil)
		resp, err := (&http.Client{}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		if line, err := r.ReadString('\n'); line != "first\n" {
			t.Fatalf("first line %q %v", line, err)
		}
		signal(t, dir, "go-2") // the script goes on only now
		if rest, err := io.ReadAll(r); string(rest) != "second\n" || err != nil {
			t.Fatalf("rest %q %v", rest, err)
		}
	})

	t.Run("hints", func(t *testing.T) {
		heads, body := splitHeads(rawExchange(t, s.URL, "/hints.php", "HTTP/1.1"))
		if len(heads) != 2 || !strings.HasPrefix(heads[0], "HTTP/1.1 103 Early Hints\r\n") || !strings.HasPrefix(heads[1], "HTTP/1.1 201 Created\r\n") {
			t.Fatalf("heads %q", heads)
		}
		// Only the hints go in the 103; the headers set before stay for the answer.
		if !strings.Contains(heads[0], "\r\nLink: </style.css>; rel=preload; as=style") || strings.Contains(heads[0], "X-Before") || strings.Contains(heads[0], "Set-Cookie") {
			t.Fatalf("103: %q", heads[0])
		}
		if strings.Contains(heads[1], "Link:") || !strings.Contains(heads[1], "X-Before: kept") || !strings.Contains(heads[1], "Set-Cookie: c=v") || !strings.HasSuffix(body, "page") {
			t.Fatalf("answer: %q %q", heads[1], body)
		}
	})

	t.Run("X-Sendfile", func(t *testing.T) {
		if r := get(t, s.URL+"/.private/report.csv"); r.Status != 403 {
			t.Fatalf("the file itself: %d, want 403", r.Status)
		}
		r := get(t, s.URL+"/sendfile.php")
		if r.Status != 200 || string(r.Body) != "a,b\n1,2\n" || r.Header.Get("Content-Type") != "text/csv;charset=UTF-8" || r.Header.Get("X-Sendfile") != "" {
			t.Fatalf("%d %q %v", r.Status, r.Body, r.Header)
		}
	})
}

// writeFiles creates each file with its content, and the directories above it.
func writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSendfile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	report := filepath.Join(root, ".private", "report.csv")
	writeFiles(t, map[string]string{report: "a,b\n1,2\n", filepath.Join(outside, "secret.txt"): "secret"})
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(root, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	s := streamingServer(t, "cli", "", "http:\n  root: "+root+"\n")
	sendfile := func(file string) string { return s.URL + "/sendfile?file=" + url.QueryEscape(file) }
	accel := func(uri string) string { return s.URL + "/accel?uri=" + url.QueryEscape(uri) }

	r := do(t, http.MethodGet, sendfile(report), nil, "Accept-Encoding", "identity")
	if r.Status != 200 || string(r.Body) != "a,b\n1,2\n" {
		t.Fatalf("X-Sendfile: %d %q", r.Status, r.Body)
	}
	if r.Header.Get("Content-Type") != "text/csv" || r.Header.Get("Content-Disposition") != `attachment; filename="report.csv"` ||
		r.Header.Get("X-Sendfile") != "" || r.Header.Get("Content-Length") != "8" || r.Header.Get("Accept-Ranges") != "bytes" {
		t.Fatalf("X-Sendfile headers: %v", r.Header)
	}
	etag := r.Header.Get("ETag")
	if etag == "" || r.Header.Get("Last-Modified") == "" {
		t.Fatalf("no validators: %v", r.Header)
	}

	r = do(t, http.MethodGet, sendfile(report), nil, "Range", "bytes=4-6", "Accept-Encoding", "identity")
	if r.Status != 206 || string(r.Body) != "1,2" || r.Header.Get("Content-Range") != "bytes 4-6/8" {
		t.Fatalf("Range: %d %q %v", r.Status, r.Body, r.Header)
	}
	r = do(t, http.MethodGet, sendfile(report), nil, "If-None-Match", etag)
	if r.Status != 304 || len(r.Body) != 0 {
		t.Fatalf("If-None-Match: %d %q", r.Status, r.Body)
	}
	writeFiles(t, map[string]string{filepath.Join(root, "exports", "report.csv"): "a,b\n1,2\n"})
	r = do(t, http.MethodGet, accel("/exports/report.csv"), nil, "Accept-Encoding", "identity")
	if r.Status != 200 || string(r.Body) != "a,b\n1,2\n" || r.Header.Get("Content-Type") != "text/csv" || r.Header.Get("X-Accel-Redirect") != "" {
		t.Fatalf("X-Accel-Redirect: %d %q %v", r.Status, r.Body, r.Header)
	}
	// A dot path is the root's to refuse, as nginx's deny meets its internal redirect (issue 15).
	if r := get(t, accel("/.private/report.csv")); r.Status != 403 || strings.Contains(string(r.Body), "a,b") {
		t.Fatalf("X-Accel-Redirect to a dot path: %d %q", r.Status, r.Body)
	}

	for _, u := range []string{sendfile("/etc/passwd"), sendfile(filepath.Join(outside, "secret.txt")), sendfile(filepath.Join(root, "leak.txt")),
		sendfile(root + "/../" + filepath.Base(outside) + "/secret.txt"), accel("/../" + filepath.Base(outside) + "/secret.txt")} {
		r := get(t, u)
		if r.Status != 500 || strings.Contains(string(r.Body), "secret") || strings.Contains(string(r.Body), "root:") {
			t.Fatalf("%s: %d %q, want it refused", u, r.Status, r.Body)
		}
	}
	eventually(t, 10*time.Second, "5 refusals in the log", func() bool { return s.log.count("PHP named a file the server does not send") == 5 })
	// Each answer freed the worker before its file was sent: one worker served them all.
	if r := get(t, s.URL+"/pid"); r.Status != 200 {
		t.Fatal(r.Status)
	}
}

// TestSendfileDirs: http.sendfile_dirs lets PHP send files kept outside the document root,
// and only those, with or without a root.
func TestSendfileDirs(t *testing.T) {
	t.Parallel()
	root, private, other := t.TempDir(), t.TempDir(), t.TempDir()
	invoice := filepath.Join(private, "invoices", "42.pdf")
	writeFiles(t, map[string]string{invoice: "%PDF-1.7 invoice 42", filepath.Join(other, "secret.txt"): "secret"})
	for _, roots := range []string{"", "  root: " + root + "\n"} {
		s := streamingServer(t, "cli", "", "http:\n"+roots+"  sendfile_dirs: ["+private+"]\n")
		sendfile := func(file string) string { return s.URL + "/sendfile?file=" + url.QueryEscape(file) }
		r := do(t, http.MethodGet, sendfile(invoice), nil, "Range", "bytes=0-7")
		if r.Status != 206 || string(r.Body) != "%PDF-1.7" {
			t.Fatalf("root %q: X-Sendfile from http.sendfile_dirs: %d %q", roots, r.Status, r.Body)
		}
		for _, file := range []string{filepath.Join(other, "secret.txt"), private + "/../" + filepath.Base(other) + "/secret.txt"} {
			if r := get(t, sendfile(file)); r.Status != 500 || strings.Contains(string(r.Body), "secret") {
				t.Fatalf("root %q: %s: %d %q, want it refused", roots, file, r.Status, r.Body)
			}
		}
	}
}

// gunzipStream decodes a gzip stream as it arrives.
func gunzipStream(t *testing.T, body io.Reader) *bufio.Reader {
	t.Helper()
	zr, err := gzip.NewReader(body)
	if err != nil {
		t.Fatal(err)
	}
	return bufio.NewReader(zr)
}
