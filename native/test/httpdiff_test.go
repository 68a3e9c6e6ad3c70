package nativetest

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/http1"
)

// The differential test of direct mode's HTTP/1.1 parser (native/http_parse.c): the same
// bytes go to the C parser (bin/http-driver, byte by byte and whole), to net/http's server and
// to internal/http1's server, and what each makes of them is compared: the requests read
// (method, target, body) and how the stream ends (read to its end, refused with which status,
// a body error, truncated). A disagreement fails, except those in the table below, which
// say what the other server does and why the parser differs.

// outcome is what a server made of a stream: its requests, then how it ended.
type outcome struct {
	reqs []string // "METHOD TARGET BODY-HEX"
	end  string   // done, refused NNN, bodyerror, truncated
}

func (o outcome) String() string {
	return strings.Join(append(append([]string(nil), o.reqs...), o.end), " | ")
}

// diffCase is one stream. netHTTP and http1, when set, are what that server does instead of
// what the C parser does (outcome.String()), on purpose; why says why.
type diffCase struct {
	name, in        string
	netHTTP, http1  string
	why             string
	truncatedInHead bool // the stream ends inside a head: net/http answers 400, the others close
}

const (
	wireGet  = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	wirePost = "POST /p HTTP/1.1\r\nHost: x\r\n"
)

func chunkedPost(body string) string {
	return wirePost + "Transfer-Encoding: chunked\r\n\r\n" + body
}

var diffCases = []diffCase{
	// What all three read the same way.
	{name: "get", in: wireGet},
	{name: "pipelined", in: wireGet + wireGet + wireGet},
	{name: "content-length body then a request", in: wirePost + "Content-Length: 3\r\n\r\nabc" + wireGet},
	{name: "content-length zero", in: wirePost + "Content-Length: 0\r\n\r\n" + wireGet},
	{name: "content-length leading zeros", in: wirePost + "Content-Length: 003\r\n\r\nabc" + wireGet},
	{name: "content-length repeated equal", in: wirePost + "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc" + wireGet},
	{name: "content-length differing", in: wirePost + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"},
	{name: "content-length list", in: wirePost + "Content-Length: 3, 3\r\n\r\nabc"},
	{name: "content-length sign", in: wirePost + "Content-Length: +3\r\n\r\nabc"},
	{name: "content-length negative", in: wirePost + "Content-Length: -1\r\n\r\n"},
	{name: "content-length hex", in: wirePost + "Content-Length: 0x3\r\n\r\nabc"},
	{name: "content-length empty", in: wirePost + "Content-Length:\r\n\r\n"},
	{name: "content-length unicode space", in: wirePost + "Content-Length: 3\u00a0\r\n\r\nabc"},
	{name: "content-length 2^63", in: wirePost + "Content-Length: 9223372036854775808\r\n\r\n"},
	{name: "content-length truncated body", in: wirePost + "Content-Length: 10\r\n\r\nabc"},
	{name: "chunked", in: chunkedPost("5\r\nhello\r\n0\r\n\r\n") + wireGet},
	{name: "chunked one byte chunks", in: chunkedPost("1\r\nh\r\n1\r\ni\r\n0\r\n\r\n") + wireGet},
	{name: "chunked extension", in: chunkedPost("5;a=b;c=\"d\"\r\nhello\r\n0;x\r\n\r\n") + wireGet},
	{name: "chunked upper hex", in: chunkedPost("A\r\n0123456789\r\n0\r\n\r\n")},
	{name: "chunked trailing space after size", in: chunkedPost("5 \r\nhello\r\n0\r\n\r\n") + wireGet},
	{name: "chunked trailer", in: chunkedPost("5\r\nhello\r\n0\r\nX-T: 1\r\nY: 2\r\n\r\n") + wireGet},
	{name: "chunked TE case", in: wirePost + "Transfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n" + wireGet},
	{name: "chunked bare LF after size", in: chunkedPost("5\nhello\r\n0\r\n\r\n")},
	{name: "chunked bare LF after last chunk", in: chunkedPost("5\r\nhello\r\n0\n\r\n")},
	{name: "chunked junk after size", in: chunkedPost("5 junk\r\nhello\r\n0\r\n\r\n")},
	{name: "chunked space before extension", in: chunkedPost("5 ;a\r\nhello\r\n0\r\n\r\n")},
	{name: "chunked CR inside size line", in: chunkedPost("5\r;\r\nhello\r\n0\r\n\r\n")},
	{name: "chunked data without CRLF", in: chunkedPost("5\r\nhelloX\r\n0\r\n\r\n")},
	{name: "chunked data with bare LF", in: chunkedPost("5\r\nhello\n0\r\n\r\n")},
	{name: "chunked size not hex", in: chunkedPost("g\r\nhello\r\n0\r\n\r\n")},
	{name: "chunked empty size", in: chunkedPost("\r\nhello\r\n0\r\n\r\n")},
	{name: "chunked size 2^60", in: chunkedPost("1000000000000000\r\nab")},
	{name: "chunked size above 2^63 after a chunk", in: chunkedPost("2\r\nab\r\nFFFFFFFFFFFFFFFF\r\nab"),
		netHTTP: "truncated", why: "net/http takes any 16 hex digits; internal/http1 and the C parser refuse a length past 2^63-1, which no body has"},
	{name: "chunked size 17 digits", in: chunkedPost("00000000000000001\r\na\r\n0\r\n\r\n")},
	{name: "chunked size 16 digits", in: chunkedPost("0000000000000001\r\na\r\n0\r\n\r\n") + wireGet},
	{name: "chunked truncated", in: chunkedPost("5\r\nhel")},
	{name: "chunked truncated before last chunk", in: chunkedPost("5\r\nhello\r\n")},
	{name: "chunked long extension", in: chunkedPost("1;" + strings.Repeat("x", 5000) + "\r\na\r\n0\r\n\r\n")},
	{name: "TE and CL", in: wirePost + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		netHTTP: "POST /p  | done", why: "net/http lets chunked override Content-Length (RFC 9112 6.3 allows that or refusing); a proxy in front may have used the length (smuggling)"},
	{name: "TE gzip", in: wirePost + "Transfer-Encoding: gzip\r\n\r\n"},
	{name: "TE list", in: wirePost + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
	{name: "TE twice", in: wirePost + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{name: "TE in HTTP/1.0", in: "POST /p HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		netHTTP: "POST /p  | done", why: "net/http ignores Transfer-Encoding in HTTP/1.0 and reads no body; a proxy may not (smuggling)"},
	{name: "obs-fold", in: "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n",
		netHTTP: "GET /  | done", why: "net/http joins folded lines; a proxy in front may not (smuggling), RFC 9112 5.2 allows refusing"},
	{name: "leading space on first field", in: "GET / HTTP/1.1\r\n Host: x\r\n\r\n"},
	{name: "space before colon", in: "GET / HTTP/1.1\r\nHost : x\r\n\r\n"},
	{name: "empty field name", in: "GET / HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n"},
	{name: "field without colon", in: "GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n"},
	{name: "field name with slash", in: "GET / HTTP/1.1\r\nHost: x\r\nA/B: v\r\n\r\n"},
	{name: "NUL in value", in: "GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n"},
	{name: "DEL in value", in: "GET / HTTP/1.1\r\nHost: x\r\nX: a\x7fb\r\n\r\n"},
	{name: "CR in value", in: "GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n"},
	{name: "obs-text in value", in: "GET / HTTP/1.1\r\nHost: x\r\nX: caf\xc3\xa9\r\n\r\n"},
	{name: "tab in value", in: "GET / HTTP/1.1\r\nHost: x\r\nX: a\tb\t\r\n\r\n"},
	{name: "many empty fields", in: "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X:\r\n", 500) + "\r\n" + wireGet,
		netHTTP: "GET /  | GET /  | done", why: "100 fields at most (http.max_header_count), as the proxied front; net/http counts none"},
	{name: "bare LF head", in: "GET / HTTP/1.1\nHost: x\n\n" + wireGet},
	{name: "leading empty line", in: "\r\n" + wireGet},
	{name: "empty lines after a POST", in: wirePost + "Content-Length: 1\r\n\r\nx\r\n" + wireGet},
	{name: "http/1.0 closes", in: "GET / HTTP/1.0\r\n\r\n" + wireGet},
	{name: "http/1.0 keep-alive", in: "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + wireGet},
	{name: "connection close", in: "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + wireGet},
	{name: "connection close in a list", in: "GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade, Close\r\n\r\n" + wireGet},
	{name: "http/1.2", in: "GET / HTTP/1.2\r\nHost: x\r\n\r\n" + wireGet},
	{name: "http/2.0", in: "GET / HTTP/2.0\r\nHost: x\r\n\r\n"},
	{name: "http/0.9", in: "GET / HTTP/0.9\r\n\r\n"},
	{name: "http/1.10", in: "GET / HTTP/1.10\r\nHost: x\r\n\r\n"},
	{name: "lower-case version", in: "GET / http/1.1\r\nHost: x\r\n\r\n"},
	{name: "no version", in: "GET /\r\nHost: x\r\n\r\n"},
	{name: "two spaces", in: "GET  / HTTP/1.1\r\nHost: x\r\n\r\n"},
	{name: "trailing space", in: "GET / HTTP/1.1 \r\nHost: x\r\n\r\n"},
	{name: "tab separator", in: "GET\t/ HTTP/1.1\r\nHost: x\r\n\r\n"},
	{name: "method not a token", in: "G(T / HTTP/1.1\r\nHost: x\r\n\r\n"},
	{name: "lower-case method", in: "get / HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "get /  | done", why: "methods of A-Z, '_' and '-' only, as nginx and the proxied front"},
	{name: "missing host", in: "GET / HTTP/1.1\r\n\r\n"},
	{name: "two hosts", in: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"},
	{name: "bad host", in: "GET / HTTP/1.1\r\nHost: a b\r\n\r\n"},
	{name: "host with slash", in: "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"},
	{name: "host ipv6", in: "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"},
	{name: "empty host", in: "GET / HTTP/1.1\r\nHost:\r\n\r\n",
		netHTTP: "GET /  | done", why: "a Host must name a host, as nginx and the proxied front check it: PHP builds links from HTTP_HOST"},
	{name: "full URL", in: "GET http://h:8080/x?y=1 HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET http://h:8080/x?y=1  | done", why: "REQUEST_URI is a full URL's path and query, as nginx's $request_uri and the proxied front"},
	{name: "full URL bad port", in: "GET http://h:8x/ HTTP/1.1\r\nHost: x\r\n\r\n"},
	{name: "full URL userinfo", in: "GET http://u:p@h/ HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET http://u:p@h/  | done", why: "no user:password in a request line, as the proxied front"},
	{name: "opaque URL", in: "GET mailto:a HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET mailto:a  | done", why: "a full URL must be http or https, as the proxied front"},
	{name: "relative target", in: "GET x HTTP/1.1\r\nHost: x\r\n\r\n"},
	{name: "star", in: "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n" + wireGet},
	{name: "GET star", in: "GET * HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET *  | done", why: "* only for OPTIONS, as the proxied front"},
	{name: "bad escape", in: "GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{name: "bad escape in query", in: "GET /a?%zz HTTP/1.1\r\nHost: x\r\n\r\n" + wireGet},
	{name: "control byte in target", in: "GET /a\x01 HTTP/1.1\r\nHost: x\r\n\r\n"},
	{name: "fragment in target", in: "GET /a#f HTTP/1.1\r\nHost: x\r\n\r\n"},
	{name: "CONNECT", in: "CONNECT h:443 HTTP/1.1\r\n\r\n",
		netHTTP: "CONNECT h:443  | done", why: "CONNECT and TRACE are not served (405), as nginx and the proxied front"},
	// The proxied front's rules (internal/http1, as nginx), which net/http does not have.
	{name: "TRACE", in: "TRACE / HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "TRACE /  | done", why: "as CONNECT"},
	{name: "TRACE with a bad version", in: "TRACE / HTTP/9\r\nHost: x\r\n\r\n",
		netHTTP: "refused 400", why: "a method not served is refused before its version is read, as the proxied front"},
	{name: "TRACE chunked", in: "TRACE / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		netHTTP: "TRACE /  | done", why: "as CONNECT: 405 once the head is read; no version is read, so HTTP/1.0's rule on Transfer-Encoding does not apply"},
	{name: "CONNECT two hosts", in: "CONNECT h:443 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"},
	{name: "method with underscore and dash", in: "M_-X / HTTP/1.1\r\nHost: x\r\n\r\n" + wireGet},
	{name: "method with a digit", in: "GET2 / HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET2 /  | done", why: "as lower-case method"},
	{name: "full URL upper-case https", in: "GET HTTPS://h/x HTTP/1.1\r\nHost: x\r\n\r\n" + wireGet,
		netHTTP: "GET HTTPS://h/x  | GET /  | done", why: "as full URL"},
	{name: "full URL without a path", in: "GET http://h HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET http://h  | done", why: "as full URL: the path is /"},
	{name: "full URL query without a path", in: "GET http://h:80?a=b HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET http://h:80?a=b  | done", why: "as full URL: the path is /"},
	{name: "full URL fragment in host", in: "GET http://h#f HTTP/1.1\r\nHost: x\r\n\r\n"},
	{name: "full URL fragment in path", in: "GET http://h/a#f HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET http://h/a#f  | done", why: "as full URL"},
	{name: "full URL dots in host", in: "GET http://a..b/ HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET http://a..b/  | done", why: "as empty host"},
	{name: "full URL port without host", in: "GET http://:80/ HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET http://:80/  | done", why: "as empty host"},
	{name: "full URL empty authority", in: "GET http:///x HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET http:///x  | done", why: "as empty host"},
	{name: "full URL ftp", in: "GET ftp://h/x HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET ftp://h/x  | done", why: "as opaque URL"},
	{name: "full URL without Host", in: "GET http://h/x HTTP/1.1\r\n\r\n"},
	{name: "host dots", in: "GET / HTTP/1.1\r\nHost: a..b\r\n\r\n",
		netHTTP: "GET /  | done", why: "as empty host"},
	{name: "host one dot", in: "GET / HTTP/1.1\r\nHost: .:80\r\n\r\n",
		netHTTP: "GET /  | done", why: "as empty host"},
	{name: "host trailing dot", in: "GET / HTTP/1.1\r\nHost: a.\r\n\r\n" + wireGet},
	{name: "host port only", in: "GET / HTTP/1.1\r\nHost: :80\r\n\r\n",
		netHTTP: "GET /  | done", why: "as empty host"},
	{name: "host backslash", in: "GET / HTTP/1.1\r\nHost: a\\b\r\n\r\n"},
	{name: "GET star version 2", in: "GET * HTTP/2.0\r\nHost: x\r\n\r\n"},
	{name: "star HTTP/1.0", in: "OPTIONS * HTTP/1.0\r\n\r\n" + wireGet},
	{name: "version 2 chunked", in: "GET / HTTP/2.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{name: "version 1.0 chunked", in: "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		netHTTP: "POST /  | done", why: "Transfer-Encoding in an HTTP/1.0 request is refused (400), as the proxied front: smuggling"},
	{name: "expect continue then a word", in: wirePost + "Expect: 100-continue x\r\nContent-Length: 1\r\n\r\nx" + wireGet},
	{name: "spaced name then unsupported encoding", in: wirePost + "A B: 1\r\nTransfer-Encoding: gzip\r\n\r\n"},
	{name: "spaced name then expect", in: wirePost + "A B: 1\r\nExpect: x\r\nContent-Length: 1\r\n\r\nx"},
	{name: "four stray bytes after a POST", in: wirePost + "Content-Length: 1\r\n\r\nx\r\n\r\n" + wireGet},
	{name: "six stray bytes after a POST", in: wirePost + "Content-Length: 1\r\n\r\nx\r\n\r\n\r\n" + wireGet},
	{name: "stray bytes after a GET", in: wireGet + "\r\n" + wireGet},
	{name: "stray LF after a chunked POST", in: chunkedPost("0\r\n\r\n") + "\n" + wireGet},
	{name: "connection close inside an item", in: "GET / HTTP/1.1\r\nHost: x\r\nConnection: x close\r\n\r\n" + wireGet},
	{name: "connection close in a second header", in: "GET / HTTP/1.1\r\nHost: x\r\nConnection: a\r\nConnection: x close\r\n\r\n" + wireGet},
	{name: "connection keep-alive in a second header", in: "GET / HTTP/1.0\r\nConnection: a\r\nConnection: keep-alive\r\n\r\n" + wireGet},
	{name: "connection keep-alive tab", in: "GET / HTTP/1.0\r\nConnection: x,\tkeep-alive\t\r\n\r\n" + wireGet},
	{name: "request line at 8 KiB", in: "GET /" + strings.Repeat("a", 8192-len("GET / HTTP/1.1")) + " HTTP/1.1\r\nHost: x\r\n\r\n"},
	{name: "request line past 8 KiB", in: "GET /" + strings.Repeat("a", 8193-len("GET / HTTP/1.1")) + " HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "GET /" + strings.Repeat("a", 8193-len("GET / HTTP/1.1")) + "  | done", why: "as huge request line"},
	{name: "field line past 8 KiB", in: "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 8190) + "\r\n\r\n",
		netHTTP: "GET /  | done", why: "a field line past http.max_header_line gets 431, as the proxied front"},
	{name: "head past 64 KiB", in: "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X: "+strings.Repeat("a", 8000)+"\r\n", 9) + "\r\n",
		netHTTP: "GET /  | done", why: "a head past 64 KiB gets 431, as the proxied front; net/http allows 1 MiB"},
	{name: "101 fields", in: "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X: 1\r\n", 100) + "\r\n",
		netHTTP: "GET /  | done", why: "as many empty fields"},
	{name: "100 fields", in: "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X: 1\r\n", 99) + "\r\n" + wireGet},
	{name: "expect continue", in: wirePost + "Expect: 100-continue\r\nContent-Length: 1\r\n\r\nx" + wireGet},
	{name: "expect other", in: wirePost + "Expect: something\r\nContent-Length: 1\r\n\r\nx"},
	{name: "huge head", in: "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 1200<<10) + "\r\n\r\n"},
	{name: "huge request line", in: "GET /" + strings.Repeat("a", 1200<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n",
		netHTTP: "refused 431", why: "a request line past http.max_header_line gets 414, as nginx and the proxied front"},
	{name: "truncated request line", in: "GET / HT", truncatedInHead: true},
	{name: "truncated head", in: "GET / HTTP/1.1\r\nHost: x\r\n", truncatedInHead: true},
	{name: "truncated second head", in: wireGet + "GET / HTTP/1.1\r\n", truncatedInHead: true},
	{name: "empty stream", in: ""},
}

var driverOnce struct {
	sync.Once
	path string
	err  error
}

// driver builds bin/http-driver (with AddressSanitizer) once.
func driver(t *testing.T) string {
	t.Helper()
	driverOnce.Do(func() {
		cmd := exec.Command("make", "-s", "bin/http-driver")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			driverOnce.err = fmt.Errorf("make bin/http-driver: %w\n%s", err, out)
		}
		driverOnce.path = filepath.Join(root, "bin", "http-driver")
	})
	if driverOnce.err != nil {
		t.Fatal(driverOnce.err)
	}
	return driverOnce.path
}

// runC gives in to the C parser step bytes at a time (0: whole).
func runC(t *testing.T, in string, step int, limits ...string) outcome {
	t.Helper()
	cmd := exec.Command(driver(t), append([]string{"-step", fmt.Sprint(step)}, limits...)...)
	cmd.Stdin = strings.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("http-driver -step %d: %v\n%s%s", step, err, out, ee.Stderr)
		}
		t.Fatal(err)
	}
	var o outcome
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "req":
			o.reqs = append(o.reqs, rest)
		case "end":
			switch {
			case rest == "eof" || rest == "close":
				o.end = "done"
			case strings.HasPrefix(rest, "refused "):
				o.end = rest[:len("refused 400")]
			case strings.HasPrefix(rest, "bodyerror"):
				o.end = "bodyerror"
			default:
				o.end = rest
			}
		default:
			t.Fatalf("http-driver: %q", line)
		}
	}
	return o
}

// goServer is net/http's or internal/http1's server on loopback, with a handler that reads
// each body whole and records what it read, by connection.
type goServer struct {
	addr string
	mu   sync.Mutex
	log  map[string][]string // the client's address: its requests, in order
}

func (s *goServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	entry := r.Method + " " + r.RequestURI + " " + hex.EncodeToString(b)
	switch {
	case err != nil && strings.Contains(err.Error(), "unexpected EOF"):
		entry = "truncated"
	case err != nil:
		entry = "bodyerror"
	}
	s.mu.Lock()
	s.log[r.RemoteAddr] = append(s.log[r.RemoteAddr], entry)
	s.mu.Unlock()
	w.Header().Set("Content-Length", "2")
	_, _ = io.WriteString(w, "ok")
}

func startGo(t *testing.T, kind string) *goServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &goServer{addr: ln.Addr().String(), log: map[string][]string{}}
	switch kind {
	case "net/http":
		hs := &http.Server{Handler: s, ErrorLog: nil}
		hs.ErrorLog = nil
		go func() { _ = hs.Serve(ln) }()
		t.Cleanup(func() { _ = hs.Close() })
	case "http1":
		hs := &http1.Server{Handler: s}
		go func() { _ = hs.Serve(ln) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(ctx)
		})
	}
	return s
}

// statusLine finds the answers' status lines; not anchored to a line's start, as an answer
// follows the body "ok" of the one before without a line end.
var statusLine = regexp.MustCompile(`HTTP/1\.[01] (\d{3}) `)

// run sends in on a connection of its own, half-closes it and reads the answers to the end.
func (s *goServer) run(t *testing.T, in string) outcome {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The log is by the client's address, and a port is used again once its connection is
	// gone (the server closes first: its side keeps the TIME_WAIT): an earlier connection's
	// requests must not count as this one's.
	me := c.LocalAddr().String()
	s.mu.Lock()
	delete(s.log, me)
	s.mu.Unlock()
	if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = io.WriteString(c, in) // the server may close before it has read everything
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	out, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("reading the answers: %v", err)
	}
	var o outcome
	s.mu.Lock()
	reqs := s.log[me]
	delete(s.log, me)
	s.mu.Unlock()
	for _, r := range reqs {
		if r == "truncated" || r == "bodyerror" {
			o.end = r
			break
		}
		o.reqs = append(o.reqs, r)
	}
	if o.end == "" {
		o.end = "done"
		for _, m := range statusLine.FindAllSubmatch(out, -1) {
			if code := string(m[1]); code != "100" && code != "200" {
				o.end = "refused " + code
			}
		}
	}
	return o
}

// TestHTTPParserDifferential: every case, byte by byte and whole through the C parser, then
// through net/http and internal/http1.
func TestHTTPParserDifferential(t *testing.T) {
	servers := map[string]*goServer{"net/http": startGo(t, "net/http"), "http1": startGo(t, "http1")}
	for _, tc := range diffCases {
		t.Run(tc.name, func(t *testing.T) {
			c := runC(t, tc.in, 0)
			for _, step := range []int{1, 7} {
				if got := runC(t, tc.in, step); got.String() != c.String() {
					t.Fatalf("C parser given %d bytes at a time: %s; whole: %s", step, got, c)
				}
			}
			for _, name := range []string{"net/http", "http1"} {
				want := c.String()
				if alt := map[string]string{"net/http": tc.netHTTP, "http1": tc.http1}[name]; alt != "" {
					want = alt
				}
				got := servers[name].run(t, tc.in)
				if tc.truncatedInHead && c.end == "truncated" && got.String() != want {
					// A server may answer 400 to a head cut short or close without a word.
					got.end = "truncated"
				}
				if got.String() != want {
					t.Errorf("%s: %s\nC parser: %s", name, got, c)
				}
			}
		})
	}
}

// TestHTTPCorpus runs the parser's fuzz corpus through the differential too, so a new corpus
// file is compared with net/http; the files whose difference is documented in diffCases are
// named there.
func TestHTTPCorpus(t *testing.T) {
	known := map[string]bool{"obs-fold": true, "cl-te": true, "connect": true, "trace": true, "full-url": true, "lower-star": true, "full-url-no-path": true}
	dir := filepath.Join("testdata", "http-corpus")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := startGo(t, "net/http")
	for _, e := range entries {
		in, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		c, g := runC(t, string(in), 1), s.run(t, string(in))
		if known[e.Name()] != (c.String() != g.String()) {
			t.Errorf("%s: C parser %s, net/http %s (documented difference: %v)", e.Name(), c, g, known[e.Name()])
		}
	}
}

// TestHTTPParserLimits: a head of exactly max-head bytes and exactly max-fields fields is
// read; one byte or one field more is refused with 431, whether it arrives whole or a byte at
// a time, and a head that never ends is refused once it passes the limit, not read forever.
func TestHTTPParserLimits(t *testing.T) {
	head := func(size int) string { // a head of exactly size bytes
		h := "GET / HTTP/1.1\r\nHost: x\r\nX: \r\n\r\n"
		return strings.Replace(h, "X: ", "X: "+strings.Repeat("a", size-len(h)), 1)
	}
	fields := func(n int) string {
		return "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X: 1\r\n", n-1) + "\r\n"
	}
	for _, tc := range []struct {
		name, in, want string
		limits         []string
	}{
		{"head at the limit", head(4096), "GET /  | done", []string{"-max-head", "4096"}},
		{"head past the limit", head(4097), "refused 431", []string{"-max-head", "4096"}},
		{"head past the limit by far", head(40000), "refused 431", []string{"-max-head", "4096"}},
		{"head without an end", "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 5000), "refused 431", []string{"-max-head", "4096"}},
		{"request line without an end", "GET /" + strings.Repeat("a", 5000), "refused 431", []string{"-max-head", "4096"}},
		{"pipelined heads at the limit", head(4096) + head(4096), "GET /  | GET /  | done", []string{"-max-head", "4096"}},
		{"fields at the limit", fields(64), "GET /  | done", []string{"-max-fields", "64"}},
		{"fields past the limit", fields(65), "refused 431", []string{"-max-fields", "64"}},
		{"empty fields past the limit", "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X:\r\n", 64) + "\r\n", "refused 431", []string{"-max-fields", "64"}},
		{"no fields allowed", wireGet, "refused 431", []string{"-max-fields", "0"}},
		{"field line at the limit", "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 97) + "\r\n\r\n", "GET /  | done", []string{"-max-line", "100"}},
		{"field line past the limit", "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 98) + "\r\n\r\n", "refused 431", []string{"-max-line", "100"}},
		{"unended field line past the limit", "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 200), "refused 431", []string{"-max-line", "100"}},
		{"request line at the limit", "GET /" + strings.Repeat("a", 86) + " HTTP/1.1\r\nHost: x\r\n\r\n", "GET /" + strings.Repeat("a", 86) + "  | done", []string{"-max-line", "100"}},
		{"request line past the limit", "GET /" + strings.Repeat("a", 87) + " HTTP/1.1\r\nHost: x\r\n\r\n", "refused 414", []string{"-max-line", "100"}},
		{"request line past the limit with a bare LF", "GET /" + strings.Repeat("a", 87) + " HTTP/1.1\nHost: x\n\n", "refused 414", []string{"-max-line", "100"}},
		{"unended request line past the limit", "GET /" + strings.Repeat("a", 200), "refused 414", []string{"-max-line", "100"}},
		{"request line past the limit after a POST's CRLF", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n\r\nGET /" + strings.Repeat("a", 200), "POST /  | refused 414", []string{"-max-line", "100"}},
		{"request line past the head", "GET /" + strings.Repeat("a", 5000), "refused 431", []string{"-max-head", "4096", "-max-line", "8192"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, step := range []int{0, 1, 100} {
				if got := runC(t, tc.in, step, tc.limits...); got.String() != tc.want {
					t.Errorf("given %d bytes at a time: %s, want %s", step, got, tc.want)
				}
			}
		})
	}
}
