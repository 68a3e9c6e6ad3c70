package nativetest

import (
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
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
		!regexp.MustCompile(`Uncaught RuntimeException: handler failed in \S+:\d+ \(request "GET /throw"\)`).MatchString(log) {
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
	if v := decode(t, p.do(t, request{URI: "/get", Headers: []field{{"host", "localhost"}}})); !reflect.DeepEqual(v["headers"], []any{"host"}) || v["body"] != "" {
		t.Errorf("a GET's headers: %v, want only host; body %q", v["headers"], v["body"])
	}
	// A GET with a body has it: php://input is left unread only when there is no Content-Length.
	get := post("text/plain", []byte("in a GET"))
	get.Method, get.URI = "GET", "/get"
	if v := decode(t, p.do(t, get)); v["body"] != "in a GET" || v["method"] != "GET" {
		t.Errorf("a GET with a body: %v %q, want GET %q", v["method"], v["body"], "in a GET")
	}
	if a := p.do(t, multiHeaders); a.Body != `{"host":["localhost"],"x-multi":["a","b"],"123":["x"],"x_under":["y"]}` {
		t.Errorf("getHeaders(): %d %s", a.Status, a.Body)
	}
	// A header name that would become another header once written "name: value" is a 500.
	if a := p.do(t, request{URI: "/unchecked-header"}); a.Status != 500 || len(a.Header("Set-Cookie")) != 0 {
		t.Errorf("an unchecked PSR-7 header name: %d %q; want 500 without Set-Cookie", a.Status, a.Headers)
	}
	ct, body := multipartBody(t, nil, multipartFile{"up", "u.bin", 7})
	if v := decode(t, p.do(t, post(ct, body))); !reflect.DeepEqual(v["files"], map[string]any{"up": []any{"u.bin", float64(7)}}) || v["resets"] != float64(5) {
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

// TestNativeServerRequestAsFromFrame: the Request peregrine_request_object() builds in C is the
// one Request::fromFrame() builds from peregrine_request(), as NativeServer built it before: the
// same properties initialised (the lazy ones not), the same values once read, and the same
// Errors when code outside the class writes, appends to or unsets a property, before and after
// the lazy ones are read (testdata/native_server.php's compareRequests()).
func TestNativeServerRequestAsFromFrame(t *testing.T) {
	p := startServer(t, "serve")
	get := func(uri string, headers ...field) request {
		return request{URI: uri, Headers: append([]field{{"host", "localhost"}}, headers...)}
	}
	form := post("application/x-www-form-urlencoded", []byte("a=1&b[]=2"), field{"cookie", "k=v; k2=w"})
	form.URI = "/compare?x=1"
	jsonPut := post("application/json", []byte(`{"a":1}`))
	jsonPut.Method, jsonPut.URI = "PUT", "/compare"
	empty := get("/compare", field{"content-length", "0"})
	empty.Method = "POST"
	head := get("/compare?h=1")
	head.Method = "HEAD"
	textPost := post("", []byte("raw"))
	textPost.URI, textPost.Headers = "/compare", []field{{"host", "localhost"}, {"content-length", "3"}}
	overridden := get("/compare?q=1")
	overridden.Params = []field{{"REQUEST_URI", "/compare?p=2"}, {"HTTPS", "on"}, {"REMOTE_PORT", "1e3"},
		{"SERVER_PORT", " 8080x"}, {"REQUEST_METHOD", "OPTIONS"}, {"SERVER_PROTOCOL", "HTTP/1.0"}}
	https := get("/compare")
	https.Scheme = "https"
	for name, r := range map[string]request{
		"plain GET":               get("/compare"),
		"query and cookies":       get("/compare?a=1&b[]=2&c", field{"cookie", "a=1"}, field{"cookie", "b=2"}),
		"repeated headers":        multiHeadersAt("/compare"),
		"form POST":               form,
		"JSON PUT":                jsonPut,
		"POST of length 0":        empty,
		"HEAD":                    head,
		"POST without a type":     textPost,
		"server parameters win":   overridden,
		"https":                   https,
		"a content type, no body": get("/compare", field{"content-type", "text/plain"}),
	} {
		if r.Method == "" {
			r.Method = "GET"
		}
		a := p.do(t, r)
		if a.Status != 200 || !reflect.DeepEqual(a.Header("X-Compare"), []string{"same"}) {
			t.Errorf("%s: %d, want 200 and the same Request both ways:\n%s", name, a.Status, a.Body)
		}
	}
}

// multiHeadersAt is multiHeaders sent to uri.
func multiHeadersAt(uri string) request {
	r := multiHeaders
	r.URI = uri
	return r
}

// TestNativeAnswerAsPHP: peregrine_answer() gives the answer the PHP it replaced gave (header()
// for each value, default_mimetype emptied without a Content-Type, http_response_code(),
// echo), after headers the handler set itself (testdata/cases/answer.php): repeated and
// listed headers, Location and WWW-Authenticate, a Status header, an all-digit name, an empty
// list, a value with a line break, a charset PHP adds, numbers as values.
func TestNativeAnswerAsPHP(t *testing.T) {
	p := startServer(t, "globals")
	for c := 0; c < 13; c++ {
		var got [2]*answer
		for i, impl := range []string{"native", "php"} {
			got[i] = p.do(t, caseRequest("answer", request{URI: fmt.Sprintf("/answer.php?case=%d&impl=%s", c, impl)}))
		}
		if !reflect.DeepEqual(got[0].Headers, got[1].Headers) || got[0].Status != got[1].Status || got[0].Body != got[1].Body {
			t.Errorf("case %d: peregrine_answer() gave %d %q %q, PHP gave %d %q %q", c,
				got[0].Status, got[0].Headers, got[0].Body, got[1].Status, got[1].Headers, got[1].Body)
		}
	}
}

// nativeServerMix is the i-th request of a mix through NativeServer's serve(): the Request built
// natively (a GET, with a query and cookies, a form POST, a JSON PUT, every lazy property read,
// the same compared with Request::fromFrame()) or in PHP (multipart with a file), answered with
// repeated headers, with and without a Content-Type, or a 500 after stray output.
func nativeServerMix(t *testing.T, i int) request {
	t.Helper()
	n := strconv.Itoa(i)
	switch i % 6 {
	case 0:
		return request{URI: "/r?i=" + n, Headers: []field{{"host", "localhost"}}}
	case 1:
		r := post("application/x-www-form-urlencoded", []byte("a="+n+"&b[]=2"), field{"cookie", "k=v"})
		r.URI = "/answer?q=" + n
		return r
	case 2:
		r := post("application/json", []byte(`{"n":`+n+`}`))
		r.Method, r.URI = "PUT", "/compare?x="+n
		return r
	case 3:
		ct, body := multipartBody(t, map[string]string{"f": n}, multipartFile{"doc", "d.txt", 100})
		r := post(ct, body)
		r.URI = "/answer"
		return r
	case 4:
		return request{URI: "/throw", Headers: []field{{"host", "localhost"}}}
	}
	return request{URI: "/answer?a[]=1&b=" + n, Headers: []field{{"host", "localhost"}, {"cookie", "c=" + n}}}
}

// TestNativeServerMemoryStable: after a warm-up, 3,000 more requests of nativeServerMix leave
// the worker's memory_get_usage() where it was: nothing the native Request or answer makes
// outlives its request.
func TestNativeServerMemoryStable(t *testing.T) {
	p := startServer(t, "serve")
	heap := func() int {
		a := p.do(t, request{URI: "/memory", Headers: []field{{"host", "localhost"}}})
		n, err := strconv.Atoi(a.Body)
		if err != nil {
			t.Fatalf("memory_get_usage(): %d %q", a.Status, a.Body)
		}
		return n
	}
	for i := range 600 {
		p.do(t, nativeServerMix(t, i))
	}
	before := heap()
	for i := range 3000 {
		if a := p.do(t, nativeServerMix(t, i)); a.Status == 0 {
			t.Fatalf("request %d: no status", i)
		}
	}
	// A leak grows with the requests: one byte each is 3,000.
	if after := heap(); after-before >= 3000 {
		t.Errorf("memory_get_usage() %d after the warm-up, %d after 3,000 more requests", before, after)
	}
}
