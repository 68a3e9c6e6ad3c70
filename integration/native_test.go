package integration

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"sync"
	"testing"
)

// The native runtime through the real daemon (issue 12): classic mode on testdata/docroot, and
// worker mode, where PHP's own functions behave as under PHP-FPM.

func startClassic(t *testing.T, extra string) *server {
	t.Helper()
	return startServer(t, "http:\n  root: "+fixtureDir(t, "docroot")+"\n"+extra+"workers:\n  runtime: native\n  count: 2\n")
}

// fixtureDir returns the absolute path of a directory in testdata.
func fixtureDir(t *testing.T, name string) string {
	t.Helper()
	return strings.TrimSuffix(fixture(t, "../"+name), "/")
}

func jsonOf(t *testing.T, r response) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("status %d, body %q: %v", r.Status, r.Body, err)
	}
	return m
}

func TestClassicModeRouting(t *testing.T) {
	t.Parallel()
	s := startClassic(t, "")
	tests := []struct {
		path   string
		status int
		body   string // a substring of the body
	}{
		{"/style.css", 200, "color: #333"},
		{"/info.php", 200, `"script":"\/info.php"`},
		{"/info.php/extra/path", 200, `"path_info":"\/extra\/path"`},
		{"/blog/", 200, "blog index"},
		{"/blog", 301, ""},
		{"/nothing-here.php", 404, ""},
		{"/some/pretty/url", 404, "front controller: no route /some/pretty/url"},
		{"/.env", 403, ""},
		{"/.hidden/file.txt", 403, ""},
		{"/index.php", 404, "no route /index.php"},
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tt := range tests {
		resp, err := noRedirect.Get(s.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(b.String(), tt.body) {
			t.Errorf("%s: %d %q, want %d containing %q", tt.path, resp.StatusCode, b.String(), tt.status, tt.body)
		}
		if strings.Contains(b.String(), "<?php") {
			t.Errorf("%s: PHP source served", tt.path)
		}
	}
}

func TestClassicModeBehavesAsFPM(t *testing.T) {
	t.Parallel()
	s := startClassic(t, "")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	t.Run("header and exit", func(t *testing.T) {
		resp, err := noRedirect.Get(s.URL + "/redirect")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/landed" {
			t.Fatalf("%d %v", resp.StatusCode, resp.Header)
		}
	})
	t.Run("cookies and status", func(t *testing.T) {
		r := get(t, s.URL+"/cookie")
		if r.Status != 201 || strings.Join(r.Header.Values("Set-Cookie"), "|") != "flavour=oat; path=/; HttpOnly|raw=a%20b" {
			t.Fatalf("%d %q", r.Status, r.Header.Values("Set-Cookie"))
		}
	})
	t.Run("php://input", func(t *testing.T) {
		m := jsonOf(t, do(t, http.MethodPut, s.URL+"/json", strings.NewReader(`{"a":[1,2]}`), "Content-Type", "application/json"))
		if got, _ := json.Marshal(m); string(got) != `{"got":{"a":[1,2]},"method":"PUT"}` {
			t.Fatalf("%s", got)
		}
	})
	t.Run("upload", func(t *testing.T) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		_ = mw.WriteField("title", "report")
		fw, _ := mw.CreateFormFile("doc", "report.txt")
		_, _ = fw.Write(bytes.Repeat([]byte("u"), 100<<10))
		mw.Close()
		m := jsonOf(t, do(t, http.MethodPost, s.URL+"/upload", &body, "Content-Type", mw.FormDataContentType()))
		if m["uploaded"] != true || m["moved"] != true || m["name"] != "report.txt" || m["size"] != float64(100<<10) || m["title"] != "report" {
			t.Fatalf("%v", m)
		}
	})
	t.Run("fatal error is a 500 and the next request is served", func(t *testing.T) {
		if r := get(t, s.URL+"/fatal"); r.Status != 500 {
			t.Fatalf("%d %q", r.Status, r.Body)
		}
		if r := get(t, s.URL+"/shutdown"); r.Status != 200 || string(r.Body) != "ran and shut down" {
			t.Fatalf("%d %q", r.Status, r.Body)
		}
	})
	t.Run("nothing carries over between requests", func(t *testing.T) {
		for i := range 6 { // two workers: each serves several
			if r := get(t, s.URL+"/ini"); string(r.Body) != "14" {
				t.Fatalf("request %d: precision %q: an ini_set carried over", i, r.Body)
			}
			m := jsonOf(t, get(t, s.URL+"/globals"))
			if m["counter"] != float64(1) || m["static"] != false || m["fn"] != "declared" {
				t.Fatalf("request %d: %v: globals or functions carried over", i, m)
			}
		}
	})
	t.Run("$_SERVER as PHP-FPM fills it", func(t *testing.T) {
		m := jsonOf(t, do(t, http.MethodGet, s.URL+"/server?x=1", nil, "X-Test", "yes", "Proxy", "http://evil.example"))
		want := map[string]any{"SCRIPT_NAME": "/index.php", "PHP_SELF": "/index.php", "REQUEST_URI": "/server?x=1", "QUERY_STRING": "x=1",
			"REQUEST_METHOD": "GET", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1", "HTTP_X_TEST": "yes", "sapi": "fpm-fcgi",
			"proxy": false, "remote_env": "127.0.0.1"}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("%s = %v, want %v", k, m[k], v)
			}
		}
		if !strings.HasSuffix(m["SCRIPT_FILENAME"].(string), "/docroot/index.php") || m["SERVER_NAME"] == "" {
			t.Errorf("%v", m)
		}
	})
}

// TestClassicSessionsNeverBleed: users interleaved on two workers, and clients with no cookie,
// each see only their own session.
func TestClassicSessionsNeverBleed(t *testing.T) {
	t.Parallel()
	s := startClassic(t, "")
	clientFor := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{Jar: jar}
	}
	users := map[string]*http.Client{"alice": clientFor(), "bob": clientFor()}
	read := func(c *http.Client, q string) string {
		resp, err := c.Get(s.URL + "/session" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return b.String()
	}
	for name, c := range users {
		if got := read(c, "?user="+name); got != "user="+name {
			t.Fatalf("login %s: %q", name, got)
		}
	}
	var wg sync.WaitGroup
	for range 20 {
		for name, c := range users {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if got := read(c, ""); got != "user="+name {
					t.Errorf("%s sees %q", name, got)
				}
			}()
			go func() {
				defer wg.Done()
				if got := read(http.DefaultClient, ""); got != "user=" {
					t.Errorf("a client with no cookie sees %q", got)
				}
			}()
		}
	}
	wg.Wait()
}

// TestNativeSegfaultCostsOneRequest: a worker process that crashes (an extension bug) takes only
// its own request down; the server replaces it and goes on.
func TestNativeSegfaultCostsOneRequest(t *testing.T) {
	t.Parallel()
	s := startClassic(t, "")
	if r := get(t, s.URL+"/segfault"); r.Status != http.StatusBadGateway {
		t.Fatalf("segfault: %d %q", r.Status, r.Body)
	}
	for range 4 {
		if r := get(t, s.URL+"/info.php"); r.Status != 200 {
			t.Fatalf("after the crash: %d", r.Status)
		}
	}
}

// TestNativeWorkerMode runs the integration fixture on the native runtime: the PHP library's
// API is unchanged, and exit() in a request ends the request, not the worker.
func TestNativeWorkerMode(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  runtime: native\n  count: 1\n")
	pid := string(get(t, s.URL+"/pid").Body)
	e := echo(t, do(t, http.MethodPost, s.URL+"/echo?q=1", strings.NewReader("a=1&b[]=2"), "Content-Type", "application/x-www-form-urlencoded", "Cookie", "k=v"))
	if e.Method != "POST" || e.Query != "q=1" {
		t.Fatalf("%+v", e)
	}
	r := get(t, s.URL+"/status?code=201")
	if r.Status != 201 || strings.Join(r.Header.Values("X-Custom"), ",") != "one,two" || len(r.Header.Values("Set-Cookie")) != 2 {
		t.Fatalf("%d %v", r.Status, r.Header)
	}
	if r := get(t, s.URL+"/crash"); r.Status != 200 {
		t.Fatalf("exit() in a request: %d", r.Status)
	}
	if got := string(get(t, s.URL+"/pid").Body); got != pid {
		t.Fatalf("exit() ended the worker (pid %s, now %s)", pid, got)
	}
}

// TestNativeWorkerLeavesTheServerSuperglobalLazy: a Peregrine\Worker script that never reads the
// server superglobal does not get it built for every request (half of a hello world request's
// instructions), even after the library's error path ran.
func TestNativeWorkerLeavesTheServerSuperglobalLazy(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  runtime: native\n  command: php "+fixture(t, "lazy-server.php")+"\n  count: 1\n")
	for _, path := range []string{"/", "/throw", "/"} {
		r := get(t, s.URL+path)
		if path == "/throw" {
			if r.Status != 500 {
				t.Fatalf("/throw: %d", r.Status)
			}
			continue
		}
		if r.Status != 200 || string(r.Body) != "lazy" {
			t.Fatalf("%s: %d %q", path, r.Status, r.Body)
		}
	}
}
