package integration

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// echoed is what testdata/workers/app.php's /echo route sends back.
type echoed struct {
	Method      string              `json:"method"`
	URI         string              `json:"uri"`
	Path        string              `json:"path"`
	Query       string              `json:"query"`
	QueryParams phpMap              `json:"queryParams"`
	Headers     map[string][]string `json:"headers"`
	Cookies     phpMap              `json:"cookies"`
	ParsedBody  phpMap              `json:"parsedBody"`
	Files       []struct {
		Name    string `json:"name"`
		Type    string `json:"type"`
		Size    int64  `json:"size"`
		Error   int    `json:"error"`
		SHA1    string `json:"sha1"`
		TmpPath string `json:"tmpPath"`
	} `json:"files"`
	FileKeys   []string `json:"fileKeys"`
	BodyLength int      `json:"bodyLength"`
	BodySHA1   string   `json:"bodySha1"`
	BodyHex    string   `json:"bodyHex"`
	RemoteAddr string   `json:"remoteAddr"`
	Protocol   string   `json:"protocol"`
	UserAgent  string   `json:"userAgent"`
}

// phpMap is a PHP array with string keys, which json_encode writes as [] when empty.
type phpMap map[string]any

func (m *phpMap) UnmarshalJSON(b []byte) error {
	if string(b) == "[]" {
		*m = phpMap{}
		return nil
	}
	return json.Unmarshal(b, (*map[string]any)(m))
}

func echo(t *testing.T, r response) echoed {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	var e echoed
	if err := json.Unmarshal(r.Body, &e); err != nil {
		t.Fatalf("decoding %q: %v", r.Body, err)
	}
	return e
}

const appConfig = "workers:\n  command: php %s\n  count: 2\n"

func startApp(t *testing.T, extra string) *server {
	t.Helper()
	return startServer(t, strings.Replace(appConfig, "%s", fixture(t, "app.php"), 1)+extra)
}

func TestRequestFidelity(t *testing.T) {
	t.Parallel()
	s := startApp(t, "")

	t.Run("methods", func(t *testing.T) {
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "PURGE"} {
			e := echo(t, do(t, m, s.URL+"/echo", strings.NewReader("x")))
			if e.Method != m {
				t.Errorf("method %s arrived as %s", m, e.Method)
			}
		}
	})

	t.Run("query arrays", func(t *testing.T) {
		e := echo(t, get(t, s.URL+"/echo?a[]=1&a[]=2&b[x]=y&plain=%20sp+ace"))
		if e.Path != "/echo" || e.Query != "a[]=1&a[]=2&b[x]=y&plain=%20sp+ace" || e.URI != "/echo?a[]=1&a[]=2&b[x]=y&plain=%20sp+ace" {
			t.Errorf("uri %q path %q query %q", e.URI, e.Path, e.Query)
		}
		want := map[string]any{"a": []any{"1", "2"}, "b": map[string]any{"x": "y"}, "plain": "  sp ace"[1:]}
		if !reflect.DeepEqual(map[string]any(e.QueryParams), want) {
			t.Errorf("queryParams = %#v, want %#v", e.QueryParams, want)
		}
	})

	t.Run("repeated headers and cookies", func(t *testing.T) {
		e := echo(t, do(t, "GET", s.URL+"/echo", nil,
			"X-Repeat", "one", "X-Repeat", "two", "Cookie", "session=abc%20def; theme=dark", "User-Agent", "fidelity-test"))
		if got := e.Headers["x-repeat"]; !reflect.DeepEqual(got, []string{"one", "two"}) {
			t.Errorf("x-repeat = %q", got)
		}
		if len(e.Headers["host"]) != 1 || !strings.HasPrefix(s.URL, "http://"+e.Headers["host"][0]) {
			t.Errorf("host header = %q for %s", e.Headers["host"], s.URL)
		}
		if e.Cookies["session"] != "abc def" || e.Cookies["theme"] != "dark" {
			t.Errorf("cookies = %v", e.Cookies)
		}
		if e.UserAgent != "fidelity-test" {
			t.Errorf("header('USER-AGENT') = %q", e.UserAgent)
		}
		if e.RemoteAddr != "127.0.0.1" || e.Protocol != "HTTP/1.1" {
			t.Errorf("remoteAddr %q protocol %q", e.RemoteAddr, e.Protocol)
		}
	})

	t.Run("urlencoded form", func(t *testing.T) {
		form := url.Values{"name": {"Ada Lovelace"}, "tags[]": {"a", "b"}}
		e := echo(t, do(t, "POST", s.URL+"/echo", strings.NewReader(form.Encode()), "Content-Type", "application/x-www-form-urlencoded"))
		want := map[string]any{"name": "Ada Lovelace", "tags": []any{"a", "b"}}
		if !reflect.DeepEqual(map[string]any(e.ParsedBody), want) {
			t.Errorf("parsedBody = %#v", e.ParsedBody)
		}
	})

	t.Run("multipart form with files", func(t *testing.T) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		_ = mw.WriteField("title", "Hello & welcome")
		_ = mw.WriteField("meta[lang]", "en")
		fileA := bytes.Repeat([]byte{0, 1, 2, 255}, 1000)
		w, _ := mw.CreateFormFile("docs[]", "a.bin")
		_, _ = w.Write(fileA)
		w, _ = mw.CreateFormFile("docs[]", "../../etc/b.txt")
		_, _ = w.Write([]byte("second file"))
		_ = mw.Close()
		e := echo(t, do(t, "POST", s.URL+"/echo", &body, "Content-Type", mw.FormDataContentType()))
		wantForm := map[string]any{"title": "Hello & welcome", "meta": map[string]any{"lang": "en"}}
		if !reflect.DeepEqual(map[string]any(e.ParsedBody), wantForm) {
			t.Errorf("parsedBody = %#v", e.ParsedBody)
		}
		if len(e.Files) != 2 || !reflect.DeepEqual(e.FileKeys, []string{"docs"}) {
			t.Fatalf("files = %+v keys %v", e.Files, e.FileKeys)
		}
		sum := sha1.Sum(fileA)
		if f := e.Files[0]; f.Name != "a.bin" || f.Size != int64(len(fileA)) || f.SHA1 != hex.EncodeToString(sum[:]) || f.Error != 0 {
			t.Errorf("first file = %+v", f)
		}
		if f := e.Files[1]; f.Name != "b.txt" || f.Size != 11 {
			t.Errorf("second file = %+v (the client's directories must be dropped)", f)
		}
		if e.BodyLength != 0 {
			t.Errorf("multipart body reached PHP (%d bytes); it should arrive parsed", e.BodyLength)
		}
		for _, f := range e.Files {
			eventually(t, 5*time.Second, "upload temp file removal", func() bool { return !exists(f.TmpPath) })
		}
	})

	t.Run("binary body of every byte value", func(t *testing.T) {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		e := echo(t, do(t, "POST", s.URL+"/echo", bytes.NewReader(b), "Content-Type", "application/octet-stream"))
		if e.BodyHex != hex.EncodeToString(b) {
			t.Errorf("body arrived as %s", e.BodyHex)
		}
	})

	t.Run("5 MiB body", func(t *testing.T) {
		b := bytes.Repeat([]byte("peregrine"), 5<<20/9+1)[:5<<20]
		e := echo(t, do(t, "PUT", s.URL+"/echo", bytes.NewReader(b)))
		sum := sha1.Sum(b)
		if e.BodyLength != len(b) || e.BodySHA1 != hex.EncodeToString(sum[:]) {
			t.Errorf("body length %d sha1 %s", e.BodyLength, e.BodySHA1)
		}
	})

	t.Run("chunked body", func(t *testing.T) {
		// An io.Reader of unknown length makes the client send chunked encoding.
		e := echo(t, do(t, "POST", s.URL+"/echo", struct{ *strings.Reader }{strings.NewReader("chunked body")}))
		if e.BodyLength != 12 || e.Headers["content-length"][0] != "12" {
			t.Errorf("body length %d, content-length %q", e.BodyLength, e.Headers["content-length"])
		}
	})

	t.Run("10 MiB response", func(t *testing.T) {
		r := get(t, s.URL+"/big?mb=10")
		want := bytes.Repeat([]byte("0123456789abcdef"), 10<<16)
		if r.Status != 200 || !bytes.Equal(r.Body, want) {
			t.Errorf("status %d, %d bytes", r.Status, len(r.Body))
		}
	})

	t.Run("status and repeated response headers", func(t *testing.T) {
		r := get(t, s.URL+"/status?code=418")
		if r.Status != 418 || !reflect.DeepEqual(r.Header.Values("X-Custom"), []string{"one", "two"}) ||
			!reflect.DeepEqual(r.Header.Values("Set-Cookie"), []string{"a=1", "b=2"}) {
			t.Errorf("status %d headers %v", r.Status, r.Header)
		}
	})

	t.Run("exception becomes 500 and the worker lives", func(t *testing.T) {
		for range 4 {
			if r := get(t, s.URL+"/throw"); r.Status != 500 || !strings.Contains(string(r.Body), "Internal Server Error") {
				t.Fatalf("status %d", r.Status)
			}
		}
		after := get(t, s.URL+"/pid")
		if after.Status != 200 || s.log.count(`worker failed`) != 0 {
			t.Errorf("a thrown exception cost a worker; log:\n%s", s.log.String())
		}
		s.log.waitFor(t, `thrown on purpose`, 5*time.Second)
		if r := get(t, s.URL+"/undefined"); r.Status != 500 {
			t.Errorf("an Error thrown by PHP itself: status %d", r.Status)
		}
	})
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestPHPIniAndOPcache(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n  php_ini: { memory_limit: 77M, default_socket_timeout: 17 }\n")
	tests := map[string]string{"opcache.enable_cli": "'1'", "memory_limit": "'77M'", "default_socket_timeout": "'17'"}
	for name, want := range tests {
		if r := get(t, s.URL+"/ini?name="+name); string(r.Body) != want {
			t.Errorf("%s = %s, want %s", name, r.Body, want)
		}
	}
}

func TestMalformedHTTPGets400(t *testing.T) {
	t.Parallel()
	s := startApp(t, "")
	// At least 24 bytes each: on a cleartext port that also takes HTTP/2 with prior knowledge,
	// net/http reads that many before it decides which protocol a connection speaks, so a
	// shorter request is closed after read_header_timeout instead (docs/http.md).
	for _, raw := range []string{
		"GARBAGE GARBAGE GARBAGE\r\n\r\n",
		"GET /pid HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
		"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot hex\r\n0\r\n\r\n",
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: %v %v", raw, resp, err)
		}
	}
}

func TestPSR7Mode(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "psr.php")+"\n  count: 1\n")
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("title", "psr")
	w, _ := mw.CreateFormFile("upload", "u.txt")
	_, _ = w.Write([]byte("file content"))
	_ = mw.Close()
	r := do(t, "POST", s.URL+"/psr/path?q[]=1&q[]=2", &body, "Content-Type", mw.FormDataContentType(), "Cookie", "c=3")
	if r.Status != 201 || !reflect.DeepEqual(r.Header.Values("Set-Cookie"), []string{"x=1", "y=2"}) {
		t.Fatalf("%d %v %s", r.Status, r.Header, r.Body)
	}
	var got struct {
		Method  string         `json:"method"`
		URI     string         `json:"uri"`
		Query   map[string]any `json:"query"`
		Cookies map[string]any `json:"cookies"`
		Parsed  map[string]any `json:"parsed"`
		Files   []struct {
			Name    string `json:"name"`
			Size    int    `json:"size"`
			Content string `json:"content"`
		} `json:"files"`
		Protocol string `json:"protocol"`
	}
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Method != "POST" || !strings.HasSuffix(got.URI, "/psr/path?q[]=1&q[]=2") && !strings.HasSuffix(got.URI, "/psr/path?q%5B%5D=1&q%5B%5D=2") ||
		!reflect.DeepEqual(got.Query, map[string]any{"q": []any{"1", "2"}}) || got.Cookies["c"] != "3" ||
		got.Parsed["title"] != "psr" || len(got.Files) != 1 || got.Files[0].Content != "file content" || got.Protocol != "1.1" {
		t.Fatalf("%+v", got)
	}
}

func TestFPMStyleGlobalsMode(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "globals.php")+"\n  count: 1\n")
	r := do(t, "POST", s.URL+"/legacy.php?a=1&b[]=x", strings.NewReader("c=2&a=3"),
		"Content-Type", "application/x-www-form-urlencoded", "Cookie", "sid=abc")
	if r.Status != 200 || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %v %s", r.Status, r.Header, r.Body)
	}
	var got map[string]any
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"get": map[string]any{"a": "1", "b": []any{"x"}}, "post": map[string]any{"c": "2", "a": "3"},
		"cookie": map[string]any{"sid": "abc"}, "request": map[string]any{"a": "3", "b": []any{"x"}, "c": "2"},
		"files": map[string]any{}, "method": "POST", "uri": "/legacy.php?a=1&b[]=x", "qs": "a=1&b[]=x",
		"host": strings.TrimPrefix(s.URL, "http://"), "remote": "127.0.0.1", "protocol": "HTTP/1.1", "input": "c=2&a=3",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	r = get(t, s.URL+"/legacy.php?missing=1")
	if r.Status != 404 || r.Header.Get("X-Reason") != "not here" || string(r.Body) != "not found" {
		t.Fatalf("%d %v %q", r.Status, r.Header, r.Body)
	}
}
