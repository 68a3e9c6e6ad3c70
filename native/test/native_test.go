package nativetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A mode starts peregrine-php in classic mode or in worker mode (testdata/worker.php runs the
// case script named by SCRIPT_FILENAME inside each request, so both modes run the same cases).
type mode struct {
	name   string
	worker bool
}

var modes = []mode{{"classic", false}, {"worker", true}}

// phpEngine is the PHP executable the engine modes run the runtime in (PEREGRINE_PHP_ENGINE,
// native/engine.c): FPM's own, the engine classic mode is compared with.
const phpEngine = "/usr/sbin/php-fpm8.2"

// engineModes are the modes with the runtime running inside phpEngine, named NAME-engine;
// none when it is missing.
func engineModes(t testing.TB) []mode {
	t.Helper()
	if _, err := os.Stat(phpEngine); err != nil {
		t.Logf("%s is missing: the engine modes are skipped (apt-get install php8.2-fpm)", phpEngine)
		return nil
	}
	var ms []mode
	for _, m := range modes {
		ms = append(ms, mode{m.name + "-engine", m.worker})
	}
	return ms
}

// env is what the mode adds to the process's environment.
func (m mode) env() []string {
	if strings.HasSuffix(m.name, "-engine") {
		return []string{"PEREGRINE_PHP_ENGINE=" + phpEngine}
	}
	return nil
}

// start runs the mode's process with ini settings and waits for READY.
func (m mode) start(t testing.TB, ini ...string) *proc {
	t.Helper()
	return startReady(t, startEnv(t, m.env(), m.argv(ini...)...))
}

func (m mode) argv(ini ...string) []string {
	argv := []string{runtime}
	for _, kv := range ini {
		argv = append(argv, "-d", kv)
	}
	if m.worker {
		argv = append(argv, filepath.Join(filepath.Dir(cases), "worker.php"))
	}
	return argv
}

// limits are the ini settings every case process runs with; the upload and session cases
// rely on them.
func limits(t testing.TB) (ini []string, uploads string) {
	t.Helper()
	uploads = t.TempDir()
	sessions := t.TempDir()
	return []string{"upload_max_filesize=4K", "max_file_uploads=3", "post_max_size=64K",
		"max_input_vars=20", "upload_tmp_dir=" + uploads, "session.save_path=" + sessions}, uploads
}

// caseRequest addresses testdata/cases/NAME.php as nginx's fastcgi_params would.
func caseRequest(name string, r request) request {
	if r.URI == "" {
		r.URI = "/" + name + ".php"
	}
	r.Params = append([]field{
		{"SCRIPT_FILENAME", filepath.Join(cases, name+".php")},
		{"SCRIPT_NAME", "/" + name + ".php"},
		{"DOCUMENT_ROOT", cases},
		{"SERVER_NAME", "localhost"},
	}, r.Params...)
	return r
}

// waitLog waits until the process's stdout and stderr (copied by another goroutine) hold want.
func waitLog(t *testing.T, p *proc, want string) {
	t.Helper()
	for deadline := time.Now().Add(readTimeout); !strings.Contains(p.log.String(), want); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("the log never said %q:\n%s", want, p.log)
			return
		}
	}
}

func decode(t *testing.T, a *answer) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(a.Body), &v); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%q", err, a.Body)
	}
	return v
}

func wantStatus(t *testing.T, a *answer, status int) {
	t.Helper()
	if a.Status != status {
		t.Errorf("status %d, want %d (body %.300q)", a.Status, status, a.Body)
	}
}

func wantBody(t *testing.T, a *answer, body string) {
	t.Helper()
	if a.Body != body {
		t.Errorf("body %.300q, want %q", a.Body, body)
	}
}

func wantHeader(t *testing.T, a *answer, name string, values ...string) {
	t.Helper()
	if got := a.Header(name); !reflect.DeepEqual(got, values) && !(len(got) == 0 && len(values) == 0) {
		t.Errorf("header %s: %q, want %q (all: %q)", name, got, values, a.Headers)
	}
}

type multipartFile struct {
	field, name string
	size        int
}

func multipartBody(t *testing.T, fields map[string]string, files ...multipartFile) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for k, v := range fields {
		w.WriteField(k, v)
	}
	for _, f := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, f.field, f.name))
		h.Set("Content-Type", "text/plain")
		part, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		part.Write(bytes.Repeat([]byte("u"), f.size))
	}
	w.Close()
	return w.FormDataContentType(), b.Bytes()
}

func post(contentType string, body []byte, extra ...field) request {
	return request{Method: "POST", Body: body, Headers: append([]field{{"host", "localhost"},
		{"content-type", contentType}, {"content-length", fmt.Sprint(len(body))}}, extra...)}
}

// TestCases runs the PHP-FPM behaviours that need one request each, in both modes, in one
// process per mode: every case also checks that the ones before it left nothing behind.
func TestCases(t *testing.T) {
	for _, m := range append(modes, engineModes(t)...) {
		t.Run(m.name, func(t *testing.T) {
			ini, uploads := limits(t)
			p := m.start(t, ini...)
			dest := filepath.Join(t.TempDir(), "moved.txt")
			marker := filepath.Join(t.TempDir(), "marker")
			tests := []struct {
				name  string
				req   request
				check func(t *testing.T, a *answer)
			}{
				{"sapi", request{}, func(t *testing.T, a *answer) {
					v := decode(t, a)
					if v["sapi"] != "fpm-fcgi" || v["name"] != "fpm-fcgi" || v["opcache"] != true {
						t.Errorf("PHP_SAPI %v, php_sapi_name() %v, OPcache enabled %v; want fpm-fcgi and true", v["sapi"], v["name"], v["opcache"])
					}
				}},
				{"headers", request{}, func(t *testing.T, a *answer) {
					wantStatus(t, a, 202)
					wantHeader(t, a, "X-A")
					wantHeader(t, a, "X-B", "1", "2")
					wantHeader(t, a, "Set-Cookie", "c=v%20w", "raw=x")
					v := decode(t, a)
					if v["sent"] != false || v["code"] != float64(202) {
						t.Errorf("headers_sent() %v, http_response_code() %v", v["sent"], v["code"])
					}
				}},
				{"location", request{}, func(t *testing.T, a *answer) {
					wantStatus(t, a, 302)
					wantHeader(t, a, "Location", "/next")
					wantBody(t, a, "redirecting")
				}},
				// After a POST too, as under FPM, which tells PHP every request is HTTP/1.0.
				{"location", post("application/x-www-form-urlencoded", []byte("a=1")), func(t *testing.T, a *answer) {
					wantStatus(t, a, 302)
				}},
				{"die", request{}, func(t *testing.T, a *answer) {
					wantStatus(t, a, 200)
					wantHeader(t, a, "Content-Type", "text/plain;charset=UTF-8")
					wantBody(t, a, "partial bye")
				}},
				{"status", request{}, func(t *testing.T, a *answer) {
					wantStatus(t, a, 404)
					wantHeader(t, a, "Status")
				}},
				// A status outside 100..999 (65736 would wrap to 200 in 16 bits) is answered 502
				// without headers or body, as nginx answers FPM's; the worker goes on.
				{"badstatus", request{URI: "/badstatus.php?code=1000"}, func(t *testing.T, a *answer) {
					wantStatus(t, a, 502)
					wantBody(t, a, "")
					if len(a.Headers) != 0 {
						t.Errorf("headers %q, want none", a.Headers)
					}
				}},
				{"badstatus", request{URI: "/badstatus.php?code=65736"}, func(t *testing.T, a *answer) { wantStatus(t, a, 502) }},
				{"badstatus", request{URI: "/badstatus.php?code=-1"}, func(t *testing.T, a *answer) { wantStatus(t, a, 502) }},
				{"badstatus", request{URI: "/badstatus.php?code=99"}, func(t *testing.T, a *answer) {
					wantStatus(t, a, 502)
					waitLog(t, p, "peregrine-php: the script set the HTTP status 1000, outside 100..999: answering 502\n")
				}},
				{"badstatus", request{URI: "/badstatus.php?code=999"}, func(t *testing.T, a *answer) {
					wantStatus(t, a, 999)
					wantBody(t, a, "not sentnor this")
				}},
				{"stdio", request{}, func(t *testing.T, a *answer) {
					want := `{"defined":[false,false,false],"written":false}`
					if m.worker {
						want = `{"defined":[true,true,true],"written":23}`
						waitLog(t, p, "stdio case: to the log\n")
						waitLog(t, p, "stdio case: stdout to the log\n")
					}
					wantBody(t, a, want)
				}},
				{"reqheaders", request{Headers: []field{{"x-multi", "a"}, {"123", "x"}, {"x-multi", "b"}}}, func(t *testing.T, a *answer) {
					wantBody(t, a, `{"x-multi":["a","b"],"123":["x"]}`)
				}},
				{"input", post("application/json", []byte(`{"a":1}`)), func(t *testing.T, a *answer) {
					wantBody(t, a, `["POST","{\"a\":1}","{\"a\":1}",[]]`)
				}},
				{"input", request{Method: "PUT", Body: []byte("put body"), Headers: []field{{"content-length", "8"}}}, func(t *testing.T, a *answer) {
					wantBody(t, a, `["PUT","put body","put body",[]]`)
				}},
				{"form", func() request {
					r := post("application/x-www-form-urlencoded", []byte("a=1&b%5B%5D=2&b%5B%5D=3&c[d]=4"))
					r.URI = "/form.php?g=5&a=get"
					return r
				}(), func(t *testing.T, a *answer) {
					v := decode(t, a)
					want := map[string]any{"a": "1", "b": []any{"2", "3"}, "c": map[string]any{"d": "4"}}
					if !reflect.DeepEqual(v["post"], want) {
						t.Errorf("$_POST %v, want %v", v["post"], want)
					}
					if r := v["request"].(map[string]any); r["a"] != "1" || r["g"] != "5" {
						t.Errorf("$_REQUEST %v: want POST over GET", r)
					}
				}},
				{"form", post("application/x-www-form-urlencoded", []byte("x="+strings.Repeat("y", 70<<10))), func(t *testing.T, a *answer) {
					if v := decode(t, a); v["count"] != float64(0) {
						t.Errorf("a body over post_max_size: $_POST has %v fields, want none", v["count"])
					}
				}},
				{"form", post("application/x-www-form-urlencoded", []byte(func() string {
					var vars []string
					for i := range 30 {
						vars = append(vars, fmt.Sprintf("v%d=%d", i, i))
					}
					return strings.Join(vars, "&")
				}())), func(t *testing.T, a *answer) {
					// PHP stops after the field that exceeds the limit, as under FPM.
					if v := decode(t, a); v["count"] != float64(21) {
						t.Errorf("30 fields with max_input_vars=20: $_POST has %v, want 21", v["count"])
					}
				}},
				{"upload", func() request {
					ct, body := multipartBody(t, map[string]string{"title": "hello"},
						multipartFile{"keep", "a.txt", 100}, multipartFile{"other", "b.txt", 200},
						multipartFile{"big", "c.txt", 5000})
					r := post(ct, body)
					r.URI = "/upload.php?dest=" + dest
					return r
				}(), func(t *testing.T, a *answer) {
					v := decode(t, a)
					files := v["files"].(map[string]any)
					keep, other, big := files["keep"].(map[string]any), files["other"].(map[string]any), files["big"].(map[string]any)
					if keep["uploaded"] != true || keep["moved"] != true || keep["size"] != float64(100) || keep["name"] != "a.txt" {
						t.Errorf("keep: %v; want uploaded and moved", keep)
					}
					if b, err := os.ReadFile(dest); err != nil || len(b) != 100 {
						t.Errorf("moved file: %d bytes, %v", len(b), err)
					}
					if other["uploaded"] != true || other["error"] != float64(0) || !strings.HasPrefix(other["tmp"].(string), uploads) {
						t.Errorf("other: %v; want an uploaded file in %s", other, uploads)
					}
					if big["error"] != float64(1) {
						t.Errorf("a 5000-byte file with upload_max_filesize=4K: %v, want error 1 (UPLOAD_ERR_INI_SIZE)", big)
					}
					if v["forged"] != false || !reflect.DeepEqual(v["post"], map[string]any{"title": "hello"}) {
						t.Errorf("is_uploaded_file(__FILE__) %v, $_POST %v", v["forged"], v["post"])
					}
				}},
				{"sapi", request{}, func(t *testing.T, a *answer) {
					if left, _ := os.ReadDir(uploads); len(left) != 0 {
						t.Errorf("uploaded files left after the request: %v", left)
					}
				}},
				{"upload", func() request {
					ct, body := multipartBody(t, nil, multipartFile{"f1", "1", 1}, multipartFile{"f2", "2", 1},
						multipartFile{"f3", "3", 1}, multipartFile{"f4", "4", 1})
					return post(ct, body)
				}(), func(t *testing.T, a *answer) {
					if files := decode(t, a)["files"].(map[string]any); len(files) != 3 {
						t.Errorf("4 files with max_file_uploads=3: $_FILES has %d", len(files))
					}
				}},
				{"server", request{Scheme: "https", URI: "/server.php/extra?q=1",
					Params: []field{{"PATH_INFO", "/extra"}, {"SERVER_NAME", "example.test"}},
					Headers: []field{{"host", "example.test"}, {"x-multi", "a"}, {"proxy", "http://evil"},
						{"x-multi", "b"}, {"authorization", "Basic dXNlcjpwdw=="}, {"cookie", "k=v"},
						{"x_multi", "smuggled"}, {"x.dot", "dropped"}}},
					func(t *testing.T, a *answer) {
						v := decode(t, a)
						want := map[string]any{"REQUEST_METHOD": "GET", "REQUEST_URI": "/server.php/extra?q=1",
							"QUERY_STRING": "q=1", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1",
							"REMOTE_PORT": "40000", "SERVER_ADDR": "127.0.0.1", "SERVER_PORT": "8080", "HTTPS": "on",
							"CONTENT_TYPE": "", "CONTENT_LENGTH": "", "HTTP_HOST": "example.test", "HTTP_X_MULTI": "a, b",
							"HTTP_PROXY": nil, "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_SOFTWARE": "peregrine",
							"SCRIPT_NAME": "/server.php", "PATH_INFO": "/extra", "PHP_SELF": "/server.php/extra",
							"DOCUMENT_ROOT": cases, "SERVER_NAME": "example.test", "PHP_AUTH_USER": "user", "PHP_AUTH_PW": "pw",
							"REMOTE_USER": "user", "FCGI_ROLE": "RESPONDER"}
						if !reflect.DeepEqual(v["server"], want) {
							t.Errorf("$_SERVER:\n got %v\nwant %v", v["server"], want)
						}
						// Content-Type and Content-Length are listed empty, as FPM lists them (nginx
						// passes both for every request).
						headers := map[string]any{"Host": "example.test", "X-Multi": "a, b", "Authorization": "Basic dXNlcjpwdw==", "Cookie": "k=v",
							"Content-Type": "", "Content-Length": ""}
						if !reflect.DeepEqual(v["headers"], headers) || v["apache"] != true {
							t.Errorf("getallheaders(): %v, want %v", v["headers"], headers)
						}
						if v["getenv_all"] != true {
							t.Errorf("getenv() without a name lacks the request's variables, as FPM's has them")
						}
						if v["time"] != true || v["getenv"] != "127.0.0.1" || v["getenv_proxy"] != false ||
							v["filter_get"] != "1" || v["filter_server"] != "127.0.0.1" {
							t.Errorf("REQUEST_TIME types %v, getenv %v %v, filter_input %v %v", v["time"], v["getenv"],
								v["getenv_proxy"], v["filter_get"], v["filter_server"])
						}
						if !reflect.DeepEqual(v["cookie"], map[string]any{"k": "v"}) {
							t.Errorf("$_COOKIE %v", v["cookie"])
						}
					}},
				{"server", request{}, func(t *testing.T, a *answer) {
					if v := decode(t, a); v["cookie"] != nil && len(v["cookie"].([]any)) != 0 || v["filter_get"] != nil {
						t.Errorf("the previous request's cookie or query is still there: %v %v", v["cookie"], v["filter_get"])
					}
				}},
				// REMOTE_USER is nginx's $remote_user: the Basic user name, "" when there is none.
				{"server", request{Headers: []field{{"authorization", "bAsIc   YWxpY2U6czNj"}}}, func(t *testing.T, a *answer) {
					if u := decode(t, a)["server"].(map[string]any)["REMOTE_USER"]; u != "alice" {
						t.Errorf("REMOTE_USER %q for alice's Basic credentials", u)
					}
				}},
				{"server", request{Headers: []field{{"authorization", "Basic Ym9i"}}}, func(t *testing.T, a *answer) {
					if u := decode(t, a)["server"].(map[string]any)["REMOTE_USER"]; u != "" {
						t.Errorf("REMOTE_USER %q for credentials without a colon", u)
					}
				}},
				{"server", request{Headers: []field{{"authorization", "Basic YWxpY2U6czNj!"}}}, func(t *testing.T, a *answer) {
					if u := decode(t, a)["server"].(map[string]any)["REMOTE_USER"]; u != "" {
						t.Errorf("REMOTE_USER %q for credentials that are not base64", u)
					}
				}},
				{"server", request{Headers: []field{{"authorization", "Bearer abc"}}}, func(t *testing.T, a *answer) {
					if u := decode(t, a)["server"].(map[string]any)["REMOTE_USER"]; u != "" {
						t.Errorf("REMOTE_USER %q for a Bearer token", u)
					}
				}},
				{"shutdown", request{}, func(t *testing.T, a *answer) { wantBody(t, a, "main+shutdown") }},
				{"shutdown", request{}, func(t *testing.T, a *answer) { wantBody(t, a, "main+shutdown") }},
				{"ini", request{}, func(t *testing.T, a *answer) { wantBody(t, a, "14") }},
				{"ini", request{}, func(t *testing.T, a *answer) { wantBody(t, a, "14") }},
				{"flush", request{}, func(t *testing.T, a *answer) {
					wantBody(t, a, "firstsecond")
					first := a.Frames[0]
					if len(a.Frames) < 2 || first.Type != typeResponse || first.Flags != flagMore|flagFlush || !bytes.HasSuffix(first.Payload, []byte("first")) {
						t.Errorf("flush(): first frame type %d flags %d payload %q; want RESPONSE with MORE|FLUSH and \"first\"", first.Type, first.Flags, first.Payload)
					}
				}},
				{"finish", request{URI: "/finish.php?marker=" + marker}, func(t *testing.T, a *answer) { wantBody(t, a, "done") }},
				{"sapi", request{}, func(t *testing.T, a *answer) {
					if b, err := os.ReadFile(marker); string(b) != "ran on" {
						t.Errorf("after fastcgi_finish_request() the script did not run on: %q %v", b, err)
					}
				}},
				{"big", request{}, func(t *testing.T, a *answer) {
					if len(a.Body) != 3000000 || len(a.Frames) < 3 {
						t.Errorf("3 MB body: got %d bytes in %d frames", len(a.Body), len(a.Frames))
					}
				}},
				{"big", request{Method: "HEAD"}, func(t *testing.T, a *answer) {
					wantStatus(t, a, 200)
					wantBody(t, a, "")
				}},
				{"noread", request{Method: "PUT", Body: bytes.Repeat([]byte("z"), 300<<10), Headers: []field{{"content-length", fmt.Sprint(300 << 10)}}},
					func(t *testing.T, a *answer) { wantBody(t, a, "ignored 307200 bytes") }},
				{"noread", post("text/plain", bytes.Repeat([]byte("z"), 200<<10)),
					func(t *testing.T, a *answer) { wantBody(t, a, "ignored 204800 bytes") }},
				{"throw", request{}, func(t *testing.T, a *answer) { wantStatus(t, a, 500) }},
				{"hints", request{}, func(t *testing.T, a *answer) {
					want := [][]field{{{"Link", "</style.css>; rel=preload; as=style"}}}
					if !reflect.DeepEqual(a.Hints, want) {
						t.Errorf("HINTS %q, want %q", a.Hints, want)
					}
					wantHeader(t, a, "Link")
					wantBody(t, a, "after hints")
				}},
				{"abort", request{}, func(t *testing.T, a *answer) { wantBody(t, a, "[0,0,0]") }},
				{"cloexec", request{}, func(t *testing.T, a *answer) { wantBody(t, a, "checked") }},
				{"sapi", request{}, func(t *testing.T, a *answer) { wantStatus(t, a, 200) }},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					tt.check(t, p.do(t, caseRequest(tt.name, tt.req)))
				})
			}
		})
	}
}

// TestSessionIsolation: a request without the cookie never sees another user's session, and
// gets a new one with its Set-Cookie.
func TestSessionIsolation(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ini, _ := limits(t)
			p := start(t, m.argv(ini...)...)
			alice := p.do(t, caseRequest("session", request{URI: "/session.php?user=alice"}))
			cookie := alice.Header("Set-Cookie")
			if len(cookie) != 1 || !strings.HasPrefix(cookie[0], "PHPSESSID=") {
				t.Fatalf("first session: Set-Cookie %q", cookie)
			}
			id := decode(t, alice)["id"].(string)

			other := p.do(t, caseRequest("session", request{}))
			v := decode(t, other)
			if v["id"] == id || len(v["session"].([]any)) != 0 {
				t.Errorf("a request without a cookie got session %v with %v; want a new, empty one", v["id"], v["session"])
			}
			if c := other.Header("Set-Cookie"); len(c) != 1 || strings.Contains(c[0], id) {
				t.Errorf("the new session's Set-Cookie: %q", c)
			}

			back := p.do(t, caseRequest("session", request{Headers: []field{{"cookie", "PHPSESSID=" + id}}}))
			if v := decode(t, back); !reflect.DeepEqual(v["session"], map[string]any{"user": "alice"}) {
				t.Errorf("alice's cookie: session %v, want her data", v["session"])
			}
			none := p.do(t, caseRequest("sapi", request{Headers: []field{{"cookie", "PHPSESSID=" + id}}}))
			if c := none.Header("Set-Cookie"); len(c) != 0 {
				t.Errorf("a request that starts no session got Set-Cookie %q", c)
			}
			if v := decode(t, none); v["session"] != nil {
				t.Errorf("a request that starts no session sees $_SESSION %v", v["session"])
			}
		})
	}
}

// TestClassicRedeclares: each classic request starts from nothing, so a script declaring a
// function and a class runs again in the same process.
func TestClassicRedeclares(t *testing.T) {
	p := start(t, modes[0].argv()...)
	for range 3 {
		a := p.do(t, caseRequest("declare", request{}))
		wantStatus(t, a, 200)
		wantBody(t, a, "function DeclaredHere")
	}
}

// TestFatalError: a fatal error answers 500. Classic mode goes on; a worker, whose engine a
// bailout may have left unusable, answers and exits for the server to replace it.
func TestFatalError(t *testing.T) {
	for _, m := range modes {
		for _, tt := range []struct{ script, logged string }{
			{"fatal", "Allowed memory size"},
			{"usererror", "the application gave up"},
		} {
			t.Run(m.name+"/"+tt.script, func(t *testing.T) {
				p := start(t, m.argv()...)
				a := p.do(t, caseRequest(tt.script, request{}))
				wantStatus(t, a, 500)
				if strings.Contains(a.Body, "after") {
					t.Errorf("body %q: the script went on after the fatal error", a.Body)
				}
				if !m.worker {
					wantStatus(t, p.do(t, caseRequest("sapi", request{})), 200)
					p.in.Close()
				}
				p.expectEOF(t)
				want := map[bool]int{false: 0, true: 255}[m.worker]
				if code := p.waitExit(t); code != want {
					t.Errorf("exit status %d, want %d", code, want)
				}
				// The log is complete once the process has exited.
				if !strings.Contains(p.log.String(), tt.logged) {
					t.Errorf("the fatal error is not in the log:\n%s", p.log)
				}
			})
		}
	}
}

// TestTimeLimit: max_execution_time counts per request, in both modes. Worker mode arms the
// timer again only when its last arming is older than a tenth of a second (worker.c): many
// short requests in a row must not add up to a timeout, a request that changed its limit with
// set_time_limit() must not leave the next one without one, and a request that runs past the
// limit must still end in it, after a run of requests that did not arm the timer again.
func TestTimeLimit(t *testing.T) {
	timelimit := func(query string) request {
		return caseRequest("timelimit", request{URI: "/timelimit.php?" + query})
	}
	for _, m := range modes {
		t.Run(m.name+"/short requests add up to no timeout", func(t *testing.T) {
			p := start(t, m.argv("max_execution_time=1")...)
			for i := 0; i < 30; i++ { // 1.8 s of CPU in all, 60 ms a request
				a := p.do(t, timelimit("cpu=60"))
				wantStatus(t, a, 200)
				wantBody(t, a, "done")
			}
		})
		for _, tt := range []struct{ name, before string }{
			{"after short requests", "cpu=0"},
			{"after a request without a limit", "limit=0"},
			{"after a request with a longer limit", "limit=30"},
		} {
			t.Run(m.name+"/the limit ends a long request "+tt.name, func(t *testing.T) {
				p := start(t, m.argv("max_execution_time=1")...)
				for i := 0; i < 20; i++ {
					wantStatus(t, p.do(t, timelimit(tt.before)), 200)
				}
				if a := p.do(t, timelimit("cpu=5000")); a.Status != 500 || strings.Contains(a.Body, "done") {
					t.Fatalf("status %d, body %q: the request outran its time limit", a.Status, a.Body)
				}
				if m.worker {
					p.expectEOF(t)
					if code := p.waitExit(t); code != 255 {
						t.Errorf("exit status %d, want 255", code)
					}
				} else {
					wantStatus(t, p.do(t, timelimit("cpu=0")), 200)
					p.in.Close()
					p.expectEOF(t)
					p.waitExit(t)
				}
				if !strings.Contains(p.log.String(), "Maximum execution time of 1 second exceeded") {
					t.Errorf("the time limit is not in the log:\n%s", p.log)
				}
			})
		}
	}
}

// TestFatalErrorDisplayed: with display_errors on, the answer is still a 500 (FPM would say
// 200, docs/compatibility.md) and carries what PHP displayed.
func TestFatalErrorDisplayed(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := start(t, m.argv("display_errors=1", "html_errors=0")...)
			a := p.do(t, caseRequest("usererror", request{}))
			wantStatus(t, a, 500)
			if !strings.Contains(a.Body, "before") || !strings.Contains(a.Body, "Fatal error: the application gave up") {
				t.Errorf("body %q: want the output and the displayed error", a.Body)
			}
		})
	}
}

// TestWorkerKeepsState: what the worker script keeps on purpose survives requests, exit()
// included.
func TestWorkerKeepsState(t *testing.T) {
	p := start(t, modes[1].argv()...)
	p.do(t, caseRequest("location", request{}))
	p.do(t, caseRequest("throw", request{}))
	a := p.do(t, caseRequest("sapi", request{URI: "/served", Params: []field{{"PATH_INFO", "/served"}}}))
	wantBody(t, a, "3")
}

// TestWorkerEnvironmentFollowsPutenv: in worker mode $_SERVER's environment part is imported
// once and reused; a putenv() (which persists in a worker, docs/compatibility.md) must still
// show in $_SERVER from the next request on, as getenv() shows it.
func TestWorkerEnvironmentFollowsPutenv(t *testing.T) {
	p := start(t, modes[1].argv()...)
	for _, step := range []struct{ query, want string }{
		{"", `[null,null]`},
		{"set=1", `[null,null]`},
		{"", `["1","1"]`},
		{"set=2", `["1","1"]`},
		{"", `["2","2"]`},
	} {
		a := p.do(t, caseRequest("putenv", request{URI: "/putenv.php?" + step.query}))
		wantBody(t, a, step.want)
	}
}

// TestBatchAroundTheReadBuffer: requests written back to back in one write, with bodies around
// the runtime's 64 KiB read-ahead buffer and the pipe's size, some read by PHP and some left
// unread: each answer must carry its own request's body, in both modes.
func TestBatchAroundTheReadBuffer(t *testing.T) {
	sizes := []int{0, 1, 4096, 65536 - 200, 65536 - 16, 65535, 65536, 65537, 3 * 65536, 200 << 10, 17}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := start(t, m.argv()...)
			var batch []byte
			var want []string
			first := p.nextID
			for i, size := range sizes {
				body := bytes.Repeat([]byte{byte('a' + i)}, size)
				name := "input"
				if i%3 == 2 {
					name = "noread" // its body stays unread: the runtime must skip it
				}
				r := caseRequest(name, request{Method: "POST", Body: body,
					Headers: []field{{"Content-Type", "application/octet-stream"}, {"Content-Length", strconv.Itoa(size)}}})
				batch = append(batch, encodeRequest(p.nextID, r)...)
				p.nextID++
				if name == "input" {
					want = append(want, fmt.Sprintf(`["POST",%q,%q,[]]`, body, body))
				} else {
					want = append(want, "")
				}
			}
			written := p.write(batch)
			for i := range sizes {
				a := p.readAnswer(t, first+uint32(i))
				if want[i] != "" && a.Body != want[i] {
					t.Errorf("request %d (%d bytes): body %.120q, want %.120q", i, sizes[i], a.Body, want[i])
				}
				if want[i] == "" && a.Status != 200 {
					t.Errorf("request %d (%d bytes, unread): status %d", i, sizes[i], a.Status)
				}
			}
			if err := <-written; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWorkerArgv: the worker script gets its arguments as $argv, as under the CLI.
func TestWorkerArgv(t *testing.T) {
	p := start(t, append(modes[1].argv(), "extra")...)
	p.in.Close()
	p.waitExit(t)
	if want := `worker booting: [2,"extra","fpm-fcgi"]`; !strings.Contains(p.log.String(), want) {
		t.Errorf("log %q lacks %q", p.log, want)
	}
}

// TestStop: STOP (worker) or the end of fd 3 (both modes) ends the process with status 0.
func TestStop(t *testing.T) {
	for _, tt := range []struct {
		name   string
		m      mode
		stop   bool
		logged string
	}{
		{"worker STOP", modes[1], true, "worker stopping"},
		{"worker EOF", modes[1], false, "worker stopping"},
		{"classic STOP", modes[0], true, ""},
		{"classic EOF", modes[0], false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, tt.m.argv()...)
			wantStatus(t, p.do(t, caseRequest("sapi", request{})), 200)
			if tt.stop {
				<-p.write(appendFrame(nil, typeStop, 0, nil))
			} else {
				p.in.Close()
			}
			p.expectEOF(t)
			if code := p.waitExit(t); code != 0 {
				t.Errorf("exit status %d, want 0", code)
			}
			if !strings.Contains(p.log.String(), tt.logged) {
				t.Errorf("log %q lacks %q", p.log, tt.logged)
			}
		})
	}
}

// TestProtocolErrors: a frame the worker cannot accept gets an ERROR frame and exit status 70.
func TestProtocolErrors(t *testing.T) {
	valid := encodeRequest(1, caseRequest("sapi", request{}))
	for _, tt := range []struct {
		name  string
		m     mode
		bytes []byte
	}{
		{"version 1", modes[0], append([]byte{1}, valid[1:]...)},
		{"unknown type", modes[0], appendFrame(nil, 9, 1, nil)},
		{"RESPONSE from the server", modes[1], appendFrame(nil, typeResponse, 1, []byte{200, 0, 0, 0, 0, 0})},
		{"head longer than payload", modes[0], appendFrame(nil, typeRequest, 1, []byte{0xff, 0, 0, 0, 'G'})},
		{"payload without head length", modes[1], appendFrame(nil, typeRequest, 1, []byte{1})},
		{"too few head fields", modes[0], appendFrame(nil, typeRequest, 1, []byte{3, 0, 0, 0, 'G', 0, '/'})},
		{"bad file count", modes[1], func() []byte {
			head := "GET\x00/\x00/\x00\x00HTTP/1.1\x00a\x001\x00b\x002\x00http\x00\x00x\x000"
			return appendFrame(nil, typeRequest, 1, append([]byte{byte(len(head)), 0, 0, 0}, head...))
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, tt.m.argv()...)
			<-p.write(tt.bytes)
			if f := p.readFrame(t); f.Type != typeError || len(f.Payload) == 0 {
				t.Fatalf("got frame type %d %q, want ERROR with a message", f.Type, f.Payload)
			}
			if code := p.waitExit(t); code != 70 {
				t.Errorf("exit status %d, want 70", code)
			}
		})
	}
}

// TestNoPipes: started by hand, without fds 3 and 4, it says what is wrong.
func TestNoPipes(t *testing.T) {
	out, err := exec.Command(runtime).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "fds 3 and 4") {
		t.Errorf("without fds 3 and 4: %v %q", err, out)
	}
}

// TestClassicMissingScript: as PHP-FPM, a SCRIPT_FILENAME that is absent or names no file
// answers 404 "File not found." and the process goes on.
func TestClassicMissingScript(t *testing.T) {
	p := start(t, modes[0].argv()...)
	for _, params := range [][]field{nil, {{"SCRIPT_FILENAME", filepath.Join(cases, "nothing.php")}}} {
		a := p.do(t, request{URI: "/nothing.php", Params: params})
		wantStatus(t, a, 404)
		wantBody(t, a, "File not found.\n")
	}
	wantBody(t, p.do(t, caseRequest("hello", request{})), "Hello, world!")
}

// TestOpcacheWithoutIni: with no ini file loading OPcache (no conf.d scanned), the runtime
// loads it itself.
func TestOpcacheWithoutIni(t *testing.T) {
	p := startEnv(t, []string{"PHP_INI_SCAN_DIR="}, runtime)
	if f := p.readFrame(t); f.Type != typeReady {
		t.Fatalf("first frame type %d, want READY", f.Type)
	}
	if v := decode(t, p.do(t, caseRequest("sapi", request{}))); v["opcache"] != true {
		t.Errorf("OPcache enabled: %v", v["opcache"])
	}
}

// TestUserIni: classic mode applies .user.ini files as FPM does: those of every directory from
// DOCUMENT_ROOT down to the script's, the deeper one winning, PHP_INI_SYSTEM settings ignored,
// nothing left for the next request, each directory's files cached for user_ini.cache_ttl
// seconds. Worker mode reads none.
func TestUserIni(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "sub")
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	show := `<?php echo ini_get('highlight.comment'), ' ', ini_get('highlight.string'), ' ', ini_get('allow_url_fopen');`
	write(filepath.Join(root, "show.php"), show)
	write(filepath.Join(sub, "show.php"), show)
	write(filepath.Join(root, ".user.ini"), "highlight.comment = \"#root\"\nhighlight.string = \"#root\"\nallow_url_fopen = 0\n")
	write(filepath.Join(sub, ".user.ini"), "highlight.string = \"#sub\"\n")
	at := func(dir, uri string) request {
		return request{URI: uri, Params: []field{{"SCRIPT_FILENAME", filepath.Join(dir, "show.php")},
			{"SCRIPT_NAME", uri}, {"DOCUMENT_ROOT", root + "/"}}}
	}
	const defaults = "#FF8000 #DD0000 1"

	p := start(t, modes[0].argv("user_ini.cache_ttl=300")...)
	wantBody(t, p.do(t, at(sub, "/sub/show.php")), "#root #sub 1")
	wantBody(t, p.do(t, at(root, "/show.php")), "#root #root 1")
	// Nothing is left for a script elsewhere.
	other := t.TempDir()
	write(filepath.Join(other, "show.php"), show)
	wantBody(t, p.do(t, request{URI: "/show.php", Params: []field{{"SCRIPT_FILENAME", filepath.Join(other, "show.php")},
		{"SCRIPT_NAME", "/show.php"}, {"DOCUMENT_ROOT", other}}}), defaults)
	// Cached: a change is not seen before the ttl is over.
	write(filepath.Join(sub, ".user.ini"), "highlight.string = \"#changed\"\n")
	wantBody(t, p.do(t, at(sub, "/sub/show.php")), "#root #sub 1")

	// With a ttl of 0 the files are read again once the request's second is over.
	p = start(t, modes[0].argv("user_ini.cache_ttl=0")...)
	wantBody(t, p.do(t, at(sub, "/sub/show.php")), "#root #changed 1")
	write(filepath.Join(sub, ".user.ini"), "highlight.string = \"#again\"\n")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		a := p.do(t, at(sub, "/sub/show.php"))
		if a.Body == "#root #again 1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with user_ini.cache_ttl=0 the change was never read: %q", a.Body)
		}
	}

	// user_ini.filename empty: none read.
	p = start(t, modes[0].argv("user_ini.filename=")...)
	wantBody(t, p.do(t, at(sub, "/sub/show.php")), defaults)

	// Worker mode: none.
	p = start(t, modes[1].argv()...)
	wantBody(t, p.do(t, at(sub, "/sub/show.php")), defaults)
}
