package nativetest

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// startServer runs testdata/native_server.php, a worker on Peregrine\Internal\NativeServer, in
// the given mode (serve, psr or globals).
func startServer(t *testing.T, mode string) *proc {
	t.Helper()
	ini, _ := limits(t)
	argv := modes[1].argv(ini...)
	argv[len(argv)-1] = filepath.Join(filepath.Dir(cases), "native_server.php")
	p := startEnv(t, []string{"NATIVE_MODE=" + mode}, argv...)
	if f := p.readFrame(t); f.Type != typeReady {
		t.Fatalf("first frame type %d %q, want READY\n%s", f.Type, f.Payload, p.log)
	}
	return p
}

// multiHeaders has a header sent twice, one with an all-digit name and one nginx would drop.
var multiHeaders = request{URI: "/headers", Headers: []field{{"host", "localhost"}, {"x-multi", "a"}, {"123", "x"},
	{"x-multi", "b"}, {"x_under", "y"}}}

func TestNativeServerServe(t *testing.T) {
	p := startServer(t, "serve")
	ct, body := multipartBody(t, map[string]string{"title": "t"}, multipartFile{"doc", "d.txt", 10})
	r := post(ct, body, field{"cookie", "k=v"})
	r.URI = "/x?q=1"
	a := p.do(t, r)
	wantStatus(t, a, 201)
	wantHeader(t, a, "Set-Cookie", "a=1", "b=2")
	wantHeader(t, a, "Location", "/kept-201")
	wantHeader(t, a, "Content-Type", "application/json")
	v := decode(t, a)
	want := map[string]any{"method": "POST", "uri": "/x?q=1", "query": map[string]any{"q": "1"}, "host": "localhost",
		"cookies": map[string]any{"k": "v"}, "body": "", "parsed": map[string]any{"title": "t"},
		"files":  map[string]any{"doc": []any{"d.txt", float64(10), float64(0), true}},
		"remote": []any{"127.0.0.1", float64(40000)}, "scheme": "http", "protocol": "HTTP/1.1", "resets": float64(0),
		"headers": v["headers"]}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("the Request the handler saw:\n got %v\nwant %v", v, want)
	}
	// A GET has no Content-Type or Content-Length, though getallheaders() lists them empty.
	if v := decode(t, p.do(t, request{URI: "/get", Headers: []field{{"host", "localhost"}}})); !reflect.DeepEqual(v["headers"], []any{"host"}) {
		t.Errorf("a GET's headers: %v, want only host", v["headers"])
	}

	// Request::$headers as on the cli runtime: a repeated header as a list, an all-digit name
	// (an integer key in PHP) served, names nginx would drop kept.
	if a := p.do(t, multiHeaders); a.Body != `{"host":["localhost"],"x-multi":["a","b"],"123":["x"],"x_under":["y"]}` {
		t.Errorf("Request::$headers: %d %s", a.Status, a.Body)
	}

	a = p.do(t, request{URI: "/throw"})
	wantStatus(t, a, 500)
	wantBody(t, a, "Internal Server Error")
	wantHeader(t, a, "Content-Type", "text/plain; charset=utf-8")

	a = p.do(t, request{Method: "PUT", URI: "/put", Body: []byte("a=1"), Headers: []field{{"content-type", "application/x-www-form-urlencoded"}}})
	v = decode(t, a)
	if v["body"] != "a=1" || !reflect.DeepEqual(v["parsed"], map[string]any{"a": "1"}) || v["resets"] != float64(4) {
		t.Errorf("PUT form: body %v parsed %v resets %v; want the body, its fields and 4 resets before", v["body"], v["parsed"], v["resets"])
	}
	p.in.Close()
	p.waitExit(t)
	if log := p.log.String(); !strings.Contains(log, "goes to the log") || !strings.Contains(log, "stray output") ||
		!strings.Contains(log, "Uncaught RuntimeException: handler failed") {
		t.Errorf("the handlers' output and the failure are not in the log:\n%s", log)
	}
}

func TestNativeServerPsr(t *testing.T) {
	p := startServer(t, "psr")
	r := post("application/x-www-form-urlencoded", []byte("a=1&b[]=2"), field{"cookie", "k=v"})
	r.URI = "/p?q=1"
	a := p.do(t, r)
	wantStatus(t, a, 202)
	v := decode(t, a)
	want := map[string]any{"method": "POST", "uri": "http://localhost/p?q=1", "query": map[string]any{"q": "1"},
		"parsed": map[string]any{"a": "1", "b": []any{"2"}}, "body": "a=1&b[]=2", "files": []any{},
		"cookies": map[string]any{"k": "v"}, "version": "1.1", "resets": float64(0), "headers": v["headers"]}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("the ServerRequest the handler saw:\n got %v\nwant %v", v, want)
	}
	if v := decode(t, p.do(t, request{URI: "/get", Headers: []field{{"host", "localhost"}}})); !reflect.DeepEqual(v["headers"], []any{"host"}) {
		t.Errorf("a GET's headers: %v, want only host", v["headers"])
	}
	if a := p.do(t, multiHeaders); a.Body != `{"host":["localhost"],"x-multi":["a","b"],"123":["x"],"x_under":["y"]}` {
		t.Errorf("getHeaders(): %d %s", a.Status, a.Body)
	}
	// A header name that would become another header once written "name: value" is a 500.
	if a := p.do(t, request{URI: "/unchecked-header"}); a.Status != 500 || len(a.Header("Set-Cookie")) != 0 {
		t.Errorf("an unchecked PSR-7 header name: %d %q; want 500 without Set-Cookie", a.Status, a.Headers)
	}
	ct, body := multipartBody(t, nil, multipartFile{"up", "u.bin", 7})
	if v := decode(t, p.do(t, post(ct, body))); !reflect.DeepEqual(v["files"], map[string]any{"up": []any{"u.bin", float64(7)}}) || v["resets"] != float64(4) {
		t.Errorf("uploaded files %v resets %v", v["files"], v["resets"])
	}
}

// TestNativeServerGlobals: FPM scripts run unmodified under serveGlobals(), PHP's own exit,
// header() and uncaught exceptions included.
func TestNativeServerGlobals(t *testing.T) {
	p := startServer(t, "globals")
	a := p.do(t, caseRequest("location", request{}))
	wantStatus(t, a, 302)
	wantHeader(t, a, "Location", "/next")
	wantStatus(t, p.do(t, caseRequest("throw", request{})), 500)
	a = p.do(t, caseRequest("input", post("application/json", []byte(`[1]`))))
	wantBody(t, a, `["POST","[1]","[1]",[]]`)
	a = p.do(t, caseRequest("library", post("text/plain", []byte("lib body"))))
	wantHeader(t, a, "X-Lib", "1")
	wantHeader(t, a, "X-Gone")
	wantBody(t, a, `["lib body",["X-Lib: 1"]]`)
}
