package integration

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Legacy PHP-FPM scripts (testdata/legacy: one behaviour, or a few related ones, per script,
// written as a PHP-FPM user writes them) served at the same time by classic mode and by real
// nginx + php-fpm8.2 (startNginxFPM), every request sent to both and the answers compared:
// status, every header but the connection's framing, each Set-Cookie with its attributes, and
// the body.

// legacyLimits are PHP's input limits, lowered on both sides (workers.php_ini here,
// php_admin_value in FPM's pool) so that requests can exceed them under nginx's default
// client_max_body_size of 1 MiB.
var legacyLimits = []string{"upload_max_filesize", "100K", "post_max_size", "512K", "max_file_uploads", "3", "max_input_vars", "25"}

// legacyRequest is one request of the table. A request with session set is sent with the
// cookies the earlier session requests got (a cookie jar per server); the others with none
// but their own headers.
type legacyRequest struct {
	method, path string
	headers      []string // name, value pairs
	body         string
	chunked      bool // the body is sent without a length (Transfer-Encoding: chunked)
	session      bool
}

// legacyFile is a file of a multipart body: its field, its name, and its size in bytes (of a
// repeated pattern).
type legacyFile struct {
	field, name string
	size        int
}

// legacyMultipart builds a multipart/form-data body with a fixed boundary, so that the same bytes
// go to both servers; fields are name, value pairs.
func legacyMultipart(fields []string, files ...legacyFile) (body, contentType string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	_ = mw.SetBoundary("legacy-boundary-1f2e3d")
	for i := 0; i+1 < len(fields); i += 2 {
		_ = mw.WriteField(fields[i], fields[i+1])
	}
	for _, f := range files {
		w, _ := mw.CreateFormFile(f.field, f.name)
		_, _ = w.Write(bytes.Repeat([]byte("legacy\n"), f.size/7+1)[:f.size])
	}
	_ = mw.Close()
	return b.String(), mw.FormDataContentType()
}

// legacyRequests are the requests, in order, each sent to both servers.
func legacyRequests() []legacyRequest {
	const form = "application/x-www-form-urlencoded"
	upload, uploadCT := legacyMultipart([]string{"title", "report", "tags[]", "a", "tags[]", "b"},
		legacyFile{"doc", "report.txt", 5000}, legacyFile{"pics[]", "one.png", 300}, legacyFile{"pics[]", "two.png", 0})
	// Over upload_max_filesize; over max_file_uploads; a file field left empty.
	tooBig, tooBigCT := legacyMultipart([]string{"title", "big"}, legacyFile{"doc", "big.bin", 150 << 10}, legacyFile{"small", "small.txt", 10})
	tooMany, tooManyCT := legacyMultipart(nil, legacyFile{"f1", "1.txt", 10}, legacyFile{"f2", "2.txt", 10},
		legacyFile{"f3", "3.txt", 10}, legacyFile{"f4", "4.txt", 10})
	emptyFile, emptyFileCT := legacyMultipart([]string{"title", "none"}, legacyFile{"doc", "", 0})
	overPost := url.Values{"data": {strings.Repeat("x", 600<<10)}}.Encode()
	manyVars := url.Values{}
	for i := range 30 {
		manyVars.Set(fmt.Sprintf("v%02d", i), strconv.Itoa(i))
	}
	ct := func(v string) []string { return []string{"Content-Type", v} }
	return []legacyRequest{
		// Routing: scripts, the front controller, PATH_INFO, index files, static files, 404, 403.
		{method: "GET", path: "/"},
		{method: "GET", path: "/some/pretty/url?page=2&sort=name"},
		{method: "GET", path: "/index.php/a/b?x=1"},
		{method: "GET", path: "/pathinfo.php"},
		{method: "GET", path: "/pathinfo.php/extra/path?q=%20x"},
		{method: "GET", path: "/sub/"},
		{method: "GET", path: "/sub"},
		{method: "GET", path: "/sub/?a=1"},
		{method: "GET", path: "/docs/"},
		{method: "GET", path: "/missing.php"},
		{method: "GET", path: "/missing.php/with/info"},
		{method: "GET", path: "/sub/missing.php"},
		{method: "GET", path: "/assets/site.css"},
		{method: "GET", path: "/assets/data.json?v=2"},
		{method: "GET", path: "/robots.txt"},
		{method: "HEAD", path: "/robots.txt"},
		{method: "GET", path: "/.env"},
		{method: "GET", path: "/lib/counter.php"},
		{method: "GET", path: "/pretty%20url/%C3%A9t%C3%A9?q=%C3%A9&r=a+b"},
		{method: "GET", path: "/pathinfo.php/a%20b/c%2Fd"},
		{method: "GET", path: "/pathinfo.php?"},
		{method: "GET", path: "//pathinfo.php//x"},
		{method: "GET", path: "/sub/../pathinfo.php"},
		// Headers, redirects, status codes.
		{method: "GET", path: "/headers.php"},
		{method: "HEAD", path: "/headers.php"},
		{method: "HEAD", path: "/cookies.php"},
		{method: "GET", path: "/redirect.php"},
		{method: "GET", path: "/redirect.php?to=https://example.com/elsewhere"},
		{method: "POST", path: "/redirect.php", headers: ct(form), body: "saved=1"},
		{method: "PUT", path: "/redirect.php", headers: ct(form), body: "saved=1"},
		{method: "GET", path: "/sub/landed.php?from=redirect"},
		{method: "GET", path: "/created.php"},
		{method: "GET", path: "/status.php"},
		{method: "GET", path: "/status.php?code=418"},
		{method: "GET", path: "/status.php?line=HTTP/1.1%20404%20Not%20Found"},
		{method: "GET", path: "/status.php?status=403%20Forbidden"},
		{method: "GET", path: "/status.php?code=204"},
		{method: "GET", path: "/status.php?code=304"},
		{method: "GET", path: "/status.php?code=99"}, // nginx refuses it from FPM: 502
		{method: "GET", path: "/status.php?code=-1"},
		{method: "GET", path: "/contentlength.php"},
		{method: "GET", path: "/auth.php"},
		{method: "GET", path: "/auth.php", headers: []string{"Authorization", "Basic YWxpY2U6czNjcmV0"}},
		// Cookies and sessions: a login, the same session on the next request, a logout; a
		// session id the client made up; a site of its own session cookie, regenerated.
		{method: "GET", path: "/cookies.php", headers: []string{"Cookie", "theme=dark; lang=en"}},
		{method: "GET", path: "/session.php?login=alice", session: true},
		{method: "GET", path: "/session.php", session: true},
		{method: "GET", path: "/session_logout.php", session: true},
		{method: "GET", path: "/session.php", session: true},
		{method: "GET", path: "/session.php", headers: []string{"Cookie", "PHPSESSID=madeupbytheclientRANDOM"}},
		{method: "GET", path: "/session_params.php"},
		// Bodies: JSON APIs, forms, uploads and PHP's limits on them.
		{method: "POST", path: "/json.php", headers: ct("application/json"), body: `{"name":"widget","tags":["a","b"],"n":1.5}`},
		{method: "PUT", path: "/json.php", headers: ct("application/json"), body: `{"name":"renamed"}`},
		{method: "POST", path: "/json.php", headers: ct("application/json"), body: `{"name":"streamed"}`, chunked: true},
		{method: "PATCH", path: "/json.php", headers: ct("application/json; charset=utf-8"), body: `{"name":""}`},
		{method: "POST", path: "/json.php", headers: ct("application/json"), body: `{not json`},
		{method: "POST", path: "/form.php?from=query&both=get", headers: append(ct(form), "Cookie", "c1=v1; c2=v%202"),
			body: "name=Ann+Smith&both=post&list[]=1&list[]=2&map[k]=v&empty="},
		{method: "POST", path: "/form.php", headers: ct("text/plain"), body: "just text"},
		{method: "POST", path: "/form.php"},
		{method: "POST", path: "/upload.php", headers: ct(uploadCT), body: upload},
		{method: "POST", path: "/upload.php", headers: ct(emptyFileCT), body: emptyFile},
		{method: "POST", path: "/limits.php", headers: ct(tooBigCT), body: tooBig},
		{method: "POST", path: "/limits.php", headers: ct(tooManyCT), body: tooMany},
		{method: "POST", path: "/limits.php", headers: ct(form), body: overPost},
		{method: "POST", path: "/limits.php?" + manyVars.Encode(), headers: ct(form), body: manyVars.Encode()},
		{method: "DELETE", path: "/api/items.php?id=3"},
		{method: "GET", path: "/api/items.php/extra?id=3"},
		{method: "GET", path: "/api/items.php?id=abc"},
		{method: "OPTIONS", path: "/method.php"},
		{method: "PUT", path: "/method.php", headers: ct(form), body: "a=1&b=2"},
		{method: "GET", path: "/filter.php?id=42&email=a@example.com&flag=yes",
			headers: []string{"Cookie", "theme=<b>dark</b>", "X-Client", "legacy"}},
		{method: "POST", path: "/filter.php?id=x", headers: ct(form), body: "age=17&tags[]=a&tags[]=b"},
		// The request as PHP sees it: headers, environment, $_SERVER.
		{method: "GET", path: "/allheaders.php", headers: []string{"X-Client", "legacy", "X-Multi", "a", "X-Multi", "b",
			"X_Underscore", "dropped", "Accept-Language", "fr", "User-Agent", "legacy-test/1.0"}},
		{method: "GET", path: "/env.php?a=b", headers: []string{"X-Client", "legacy", "User-Agent", "legacy-test/1.0"}},
		{method: "GET", path: "/server.php?x=1&y=%2F", headers: []string{"X-Client", "legacy", "X-Forwarded-Proto", "https"}},
		{method: "POST", path: "/server.php/more/info", headers: append(ct(form), "Authorization", "Basic Ym9iOnB3"), body: "a=1"},
		{method: "GET", path: "/server.php", headers: []string{"Authorization", "Basic YWxpY2U6czNj!"}},
		{method: "GET", path: "/server.php", headers: []string{"Authorization", "basic   Ym9i"}},
		// Per-request state: globals, functions, includes, ini settings, nothing carried over.
		{method: "GET", path: "/globals.php"},
		{method: "GET", path: "/globals.php"},
		{method: "GET", path: "/includes.php"},
		{method: "GET", path: "/includes.php"},
		{method: "GET", path: "/ini.php"},
		{method: "GET", path: "/ini.php"},
		{method: "GET", path: "/userini/show.php"},
		{method: "GET", path: "/userini/deeper/show.php"},
		{method: "GET", path: "/userini/.user.ini"},
		{method: "GET", path: "/ini.php"},
		// The end of a request: shutdown functions, exit, errors, output and its buffers.
		{method: "GET", path: "/shutdown.php"},
		{method: "GET", path: "/fatal.php"},
		{method: "GET", path: "/exception.php"},
		{method: "GET", path: "/die.php"},
		{method: "GET", path: "/die.php?how=status"},
		{method: "GET", path: "/errors.php"},
		{method: "GET", path: "/headers_sent.php"},
		{method: "GET", path: "/flush.php"},
		{method: "GET", path: "/finish.php"},
		{method: "GET", path: "/abort.php"},
		{method: "GET", path: "/buffering.php"},
		{method: "GET", path: "/big.php"},
		{method: "HEAD", path: "/big.php"},
	}
}

// answerDiff returns the lines of a and b that differ, each cut to 160 bytes.
func answerDiff(a, b answer) string {
	al, bl := strings.Split(a.String(), "\n"), strings.Split(b.String(), "\n")
	cut := func(s string) string {
		if len(s) > 160 {
			return s[:160] + "..."
		}
		return s
	}
	var out strings.Builder
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			fmt.Fprintf(&out, "  nginx + PHP-FPM: %q\n  classic mode:    %q\n", cut(x), cut(y))
		}
	}
	return out.String()
}

var (
	// cookieDateRE matches a cookie's expires attribute.
	cookieDateRE = regexp.MustCompile(`expires=([A-Z][a-z]{2}, \d{2}[- ][A-Z][a-z]{2}[- ]\d{4} \d{2}:\d{2}:\d{2} GMT)`)
	maxAgeRE     = regexp.MustCompile(`Max-Age=(\d+)`)
	// sessionRE matches the session cookies of testdata/legacy, PHP's default and session_params.php's.
	sessionRE = regexp.MustCompile(`^(PHPSESSID|LEGACYSESS)=[^;]*`)
)

// legacyExchange sends r to base (with jar when r.session) and returns the answer, normalised
// (legacyNormalise) so that the same answer from both servers prints the same.
func legacyExchange(t *testing.T, base string, jar http.CookieJar, r legacyRequest) answer {
	t.Helper()
	c := &http.Client{Timeout: 60 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if r.session {
		c.Jar = jar
	}
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	if r.chunked {
		body = io.MultiReader(body) // a reader of unknown length
	}
	req, err := http.NewRequest(r.method, base+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(r.headers); i += 2 {
		// RANDOM: a value of the client's own, new in each request (a made-up session id that
		// must not meet the other server's in the session directory they share).
		req.Header.Add(r.headers[i], strings.ReplaceAll(r.headers[i+1], "RANDOM", randomTag()))
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", r.method, base, r.path, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatalf("%s %s%s: reading the body: %v", r.method, base, r.path, err)
	}
	a := legacyNormalise(base, start, resp.StatusCode, resp.Header, b.String())
	a.step = r.method + " " + r.path
	return a
}

// legacyNormalise takes out of an answer what must differ between two servers, and only that.
func legacyNormalise(base string, start time.Time, status int, header http.Header, body string) answer {
	u, _ := url.Parse(base)
	norm := func(s string) string {
		// The two servers listen on different ports: the base URL, Host and SERVER_PORT.
		s = strings.ReplaceAll(s, base, "URL")
		s = strings.ReplaceAll(s, u.Host, "HOST")
		return strings.ReplaceAll(s, "'"+u.Port()+"'", "'PORT'")
	}
	a := answer{status: status, headers: map[string]string{}, body: norm(body)}
	for name, values := range header {
		switch {
		case answerHeaders[name]: // framing and the server's identity (see answerHeaders)
		case name == "Etag":
			// An ETag is an opaque validator of the server's making; whether there is one counts.
			a.headers[name] = "(set)"
		default:
			a.headers[name] = norm(strings.Join(values, ", "))
		}
	}
	for _, c := range header.Values("Set-Cookie") {
		// A session id is random in every server: its presence and attributes count.
		c = sessionRE.ReplaceAllString(c, "${1}=(id)")
		// Dates and Max-Age computed from the time of the request (a session cookie's lifetime,
		// time()-3600) count as their distance from it, in minutes; a fixed date stays.
		c = cookieDateRE.ReplaceAllStringFunc(c, func(m string) string {
			d := cookieDateRE.FindStringSubmatch(m)[1]
			at, err := http.ParseTime(strings.ReplaceAll(d, "-", " "))
			if delta := at.Sub(start); err == nil && delta.Abs() < 24*time.Hour {
				return fmt.Sprintf("expires=(now%+dm)", int(delta.Round(time.Minute).Minutes()))
			}
			return m
		})
		c = maxAgeRE.ReplaceAllStringFunc(c, func(m string) string {
			n, _ := strconv.Atoi(maxAgeRE.FindStringSubmatch(m)[1])
			if n == 0 {
				return m
			}
			if n < 24*3600 {
				return fmt.Sprintf("Max-Age=(%dm)", (n+30)/60)
			}
			return "Max-Age=(more than a day)"
		})
		a.cookies = append(a.cookies, c)
	}
	return a
}

// nginxPageRE matches the body of an answer nginx made itself (a 301 to a directory's slash,
// a 403, a 404), not PHP.
var nginxPageRE = regexp.MustCompile(`(?s)^<html>\r\n<head><title>\d{3} [^<]*</title></head>.*<hr><center>nginx/[\d.]+</center>\r\n</body>\r\n</html>\r\n`)

// legacyKnownDifferences sets aside, in both answers, what classic mode answers differently
// on purpose, each as docs/compatibility.md says, and only where the difference is the known
// one.
func legacyKnownDifferences(ref, got *answer) {
	knownDifferences(ref, got) // compression, on by default
	// The server's own answers (a missing script, a dotfile, a directory without its slash)
	// have the same status and a short text body, not nginx's HTML page; a redirect's Location
	// is a path where nginx makes it absolute (absolute_redirect).
	if nginxPageRE.MatchString(ref.body) && ref.status == got.status {
		for _, a := range []*answer{ref, got} {
			a.body = "(the server's own page)"
			delete(a.headers, "Content-Type")
			delete(a.headers, "X-Content-Type-Options")
		}
		if loc, ok := ref.headers["Location"]; ok && "URL"+got.headers["Location"] == loc {
			ref.headers["Location"] = got.headers["Location"]
		}
	}
	// SERVER_NAME is the address the connection came to when http.server_name is not set;
	// nginx passes its server_name, here none: empty.
	if strings.Contains(ref.body, "\nSERVER_NAME=''\n") {
		got.body = strings.Replace(got.body, "\nSERVER_NAME='127.0.0.1'\n", "\nSERVER_NAME=''\n", 1)
	}
	// A request header sent twice is one variable of both values joined, as nginx 1.23 and
	// later pass it; nginx 1.22 passes both and FPM keeps the last.
	if strings.Contains(ref.body, "\nX-Multi: b\n") {
		got.body = strings.Replace(got.body, "\nX-Multi: a, b\n", "\nX-Multi: b\n", 1)
	}
}

// TestClassicModeAnswersAsNginxFPM serves testdata/legacy with classic mode and with nginx +
// PHP-FPM and compares the answers to each request of legacyRequests.
func TestClassicModeAnswersAsNginxFPM(t *testing.T) {
	t.Parallel()
	requireNginxFPM(t)
	root := fixtureDir(t, "legacy")
	var ini strings.Builder
	for i := 0; i+1 < len(legacyLimits); i += 2 {
		fmt.Fprintf(&ini, "    %s: %s\n", legacyLimits[i], legacyLimits[i+1])
	}
	s := startServer(t, "http:\n  root: "+root+"\nworkers:\n  runtime: native\n  count: 2\n  php_ini:\n"+ini.String())
	fpm := startNginxFPM(t, root, legacyLimits...)
	jars := [2]http.CookieJar{}
	for i := range jars {
		jars[i], _ = cookiejar.New(nil)
	}
	same := 0
	requests := legacyRequests()
	for i, r := range requests {
		ref := legacyExchange(t, fpm, jars[0], r)
		got := legacyExchange(t, s.URL, jars[1], r)
		legacyKnownDifferences(&ref, &got)
		if ref.String() != got.String() {
			t.Errorf("request %d, %s %s, differs, line by line:\n%s", i, r.method, r.path, answerDiff(ref, got))
			continue
		}
		same++
	}
	t.Logf("%d of %d requests answered the same", same, len(requests))
}
