package http1

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The differential test sends the same bytes to this package's server and to net/http's, each
// on an in-memory connection whose client sent them all and then closed, and compares where
// each request ends (method, target, Host, body) and whether each answer is a refusal (its
// status class). net/http is the reference: a front that frames a request otherwise than the
// server behind it (or a proxy in front) lets requests hide in others (smuggling). Where http1
// differs on purpose it is stricter, and only in the ways listed in deliberateDifferences.

// diffHeadBytes is the head budget both servers get: net/http reads up to MaxHeaderBytes plus
// 4096 bytes of slack, which the limit rules below cover.
const diffHeadBytes = 64 << 10

// diffReq is one request as a handler saw it.
type diffReq struct {
	Method, Target, Host, Body string
	BodyErr                    bool // the body could not be read to its end
}

// diffOutcome is what one server made of the bytes.
type diffOutcome struct {
	reqs     []diffReq
	statuses []int // the final answers' status codes, in order (1xx left out)
}

// recorder is the handler of both servers: it reads the whole body and notes the request.
type recorder struct {
	mu   sync.Mutex
	reqs []diffReq
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	d := diffReq{Method: r.Method, Target: r.RequestURI, Host: r.Host, Body: string(b), BodyErr: err != nil}
	if err != nil {
		d.Body = ""
	}
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, d)
	rec.mu.Unlock()
	_, _ = io.WriteString(w, "ok\n") // ends with a line: the next status line starts one
}

func (rec *recorder) seen() []diffReq {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.reqs
}

// statusesOf returns the status codes of the final answers in what a server wrote.
func statusesOf(out []byte) []int {
	var codes []int
	for _, line := range bytes.Split(out, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("HTTP/1.")) || len(line) < 12 {
			continue
		}
		code, err := strconv.Atoi(string(line[9:12]))
		if err != nil || code < 200 {
			continue
		}
		codes = append(codes, code)
	}
	return codes
}

// syncWire is a wireConn (fuzz_test.go) safe for the goroutines net/http writes from.
type syncWire struct {
	wireConn
	mu sync.Mutex
}

func (c *syncWire) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

func (c *syncWire) output() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}

func runHTTP1(in []byte) diffOutcome {
	rec := &recorder{}
	s := &Server{Handler: rec, MaxHeaderBytes: diffHeadBytes}
	wc := &wireConn{in: bytes.NewReader(in)}
	s.newConn(wc).serve()
	return diffOutcome{reqs: rec.seen(), statuses: statusesOf(wc.out.Bytes())}
}

// oneConnListener hands out one connection, then waits to be closed.
type oneConnListener struct {
	conn   net.Conn
	served sync.Once
	closed chan struct{}
	close  sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	var c net.Conn
	l.served.Do(func() { c = l.conn })
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { l.close.Do(func() { close(l.closed) }); return nil }
func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{} }

func runNetHTTP(in []byte) diffOutcome {
	rec := &recorder{}
	wc := &syncWire{wireConn: wireConn{in: bytes.NewReader(in)}}
	ended := make(chan struct{})
	srv := &http.Server{
		Handler:        rec,
		MaxHeaderBytes: diffHeadBytes - 4096,
		ErrorLog:       log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				close(ended)
			}
		},
	}
	ln := &oneConnListener{conn: wc, closed: make(chan struct{})}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	<-ended
	_ = srv.Close()
	<-done
	return diffOutcome{reqs: normalizeNetHTTP(rec.seen()), statuses: statusesOf(wc.output())}
}

// normalizeNetHTTP gives net/http's requests the target http1 gives PHP: for a full URL in
// the request line, its path and query (REQUEST_URI as nginx sets it).
func normalizeNetHTTP(reqs []diffReq) []diffReq {
	for i, r := range reqs {
		if r.Method == http.MethodConnect || strings.HasPrefix(r.Target, "/") || r.Target == "*" {
			continue
		}
		if _, rest, ok := strings.Cut(r.Target, "://"); ok {
			if j := strings.IndexAny(rest, "/?"); j >= 0 {
				rest = rest[j:]
				if rest[0] == '?' {
					rest = "/" + rest
				}
				reqs[i].Target = rest
			} else {
				reqs[i].Target = "/"
			}
		}
	}
	return reqs
}

// A deliberate difference: http1 refuses (or stops earlier) where net/http goes on, for the
// reason given. It applies to an exchange only when http1 served a prefix of net/http's
// requests and its last answer was a refusal: http1 never serves a request net/http would
// have framed otherwise, or refused.
type deliberate struct {
	name, reason string
	applies      func(in string) bool
}

var (
	hostLine = regexp.MustCompile(`(?im)^host:[ \t]*([^\r\n]*?)[ \t]*\r?$`)
	// not anchored at a line's start: a request may begin within what a body before it took
	requestLine  = regexp.MustCompile(`(?m)(\S+) (\S+) (HTTP/[^\r\n]*)\r?$`)
	nginxMethod  = regexp.MustCompile(`^[A-Z_-]+$`)
	absoluteForm = regexp.MustCompile(`^[^/*]`)
	// a last chunk (of any spelling net/http takes) and a trailer line after it
	lastChunkThenTrailer = regexp.MustCompile(`\n0+[ \t]*(;[^\n]*)?\r\n[^\r\n]`)
)

func anyRequestLine(in string, f func(method, target, proto string) bool) bool {
	for _, m := range requestLine.FindAllStringSubmatch(in, -1) {
		if f(m[1], m[2], m[3]) {
			return true
		}
	}
	return false
}

func hasAll(in string, words ...string) bool {
	in = strings.ToLower(in)
	for _, w := range words {
		if !strings.Contains(in, w) {
			return false
		}
	}
	return true
}

var deliberateDifferences = []deliberate{
	{"obs-fold", "a folded header line is refused, not joined: a proxy in front may read it as a line of its own (RFC 9112 5.2 allows either)",
		func(in string) bool { return strings.Contains(in, "\n ") || strings.Contains(in, "\n\t") }},
	{"cl+te", "Content-Length with Transfer-Encoding is refused, not resolved for chunked: one of the two lies to somebody (RFC 9112 6.1 allows refusing; nginx does)",
		func(in string) bool { return hasAll(in, "content-length", "transfer-encoding") }},
	{"te in http/1.0", "Transfer-Encoding in an HTTP/1.0 request is refused, not ignored: a proxy may have honoured it (RFC 9112 6.1)",
		func(in string) bool { return hasAll(in, "http/1.0", "transfer-encoding") }},
	{"host as nginx", "a Host with '/', '\\', '..', or no name is refused (nginx's ngx_http_validate_host): it reaches PHP as HTTP_HOST and paths are built from it",
		func(in string) bool {
			for _, m := range hostLine.FindAllStringSubmatch(in, -1) {
				v, name := m[1], m[1]
				if i := strings.IndexByte(v, ':'); i >= 0 && !strings.HasPrefix(v, "[") {
					name = v[:i] // the port is not the name: ".:80" has none
				}
				if v == "" || strings.ContainsAny(v, "/\\") || strings.Contains(v, "..") || strings.TrimSuffix(name, ".") == "" {
					return true
				}
			}
			return false
		}},
	{"full url as nginx", "a full URL in the request line must be http(s), without user:password, and its host is checked as a Host header (nginx: 400)",
		func(in string) bool {
			return anyRequestLine(in, func(method, target, _ string) bool {
				return method != http.MethodConnect && absoluteForm.MatchString(target)
			})
		}},
	{"asterisk only for OPTIONS", "`*` is a target only for OPTIONS (RFC 9112 3.2.4); nginx refuses it otherwise, net/http hands it to the handler (a front controller would run)",
		func(in string) bool {
			return anyRequestLine(in, func(method, target, _ string) bool { return target == "*" && method != http.MethodOptions })
		}},
	{"CONNECT and TRACE", "CONNECT and TRACE are refused with 405 as nginx does: a PHP server is no proxy, and TRACE reflects credentials",
		func(in string) bool { return strings.Contains(in, "CONNECT ") || strings.Contains(in, "TRACE ") }},
	{"method as nginx", "a method of other than A-Z, '_' and '-' is refused (nginx: 400); net/http takes any token",
		func(in string) bool {
			return anyRequestLine(in, func(method, _, _ string) bool { return !nginxMethod.MatchString(method) })
		}},
	{"limits while reading", "a request line over 8 KiB (414), a header line over 8 KiB or more than 100 fields (431), or a head over its budget is refused as it is read (nginx's large_client_header_buffers); net/http has no count or line limit",
		func(in string) bool {
			if len(in) > diffHeadBytes-4096 || strings.Count(in, "\n") > 100 {
				return true
			}
			for _, line := range strings.Split(in, "\n") {
				if len(line) > 8<<10-2 {
					return true
				}
			}
			return false
		}},
	{"bare LF in a trailer", "trailer lines end with CRLF like every chunked line (net/http lets a bare LF through when a CRLF CRLF follows)",
		func(in string) bool {
			return hasAll(in, "transfer-encoding") && strings.Contains(strings.ReplaceAll(in, "\r\n", ""), "\n")
		}},
	{"trailer as a head", "trailer lines are read as header lines (a token name, no fold), and dropped; net/http lets a name with a space and a folded line through",
		func(in string) bool { return hasAll(in, "transfer-encoding") && lastChunkThenTrailer.MatchString(in) }},
}

// compareOutcomes returns nil when the two servers agree, or what http1 did differently and
// the deliberate difference that explains it; an error when nothing explains it.
func compareOutcomes(in []byte, h1, std diffOutcome) (explained string, err error) {
	reqs := h1.reqs
	same := len(reqs) == len(std.reqs) && len(h1.statuses) == len(std.statuses)
	for i := 0; same && i < len(reqs); i++ {
		same = reqs[i] == std.reqs[i]
	}
	for i := 0; same && i < len(h1.statuses); i++ {
		same = h1.statuses[i]/100 == std.statuses[i]/100
	}
	if same {
		return "", nil
	}
	describe := func() string {
		return fmt.Sprintf("input %q\nhttp1:    %+v %v\nnet/http: %+v %v", in, h1.reqs, h1.statuses, std.reqs, std.statuses)
	}
	// Stricter: a prefix of net/http's requests, then a refusal of the next head, or of the
	// last request's body.
	prefix := len(reqs) <= len(std.reqs)
	bodyRefused := false
	for i := 0; prefix && i < len(reqs); i++ {
		a, b := reqs[i], std.reqs[i]
		if i == len(reqs)-1 && a.BodyErr && !b.BodyErr {
			a.Body, a.BodyErr, bodyRefused = b.Body, false, true
		}
		prefix = a == b
	}
	refused := bodyRefused || len(h1.statuses) > 0 && h1.statuses[len(h1.statuses)-1] >= 400
	if !prefix || !refused {
		return "", fmt.Errorf("http1 frames or accepts what net/http does not:\n%s", describe())
	}
	for _, d := range deliberateDifferences {
		if d.applies(string(in)) {
			return d.name, nil
		}
	}
	return "", fmt.Errorf("http1 refuses what net/http accepts, and no deliberate difference explains it:\n%s", describe())
}

// diffCases are the cases of issue 25 items 7-14, and the usual request smuggling corpus.
// want is "" when both servers must agree, else the deliberate difference that must explain
// http1's refusal.
var diffCases = []struct {
	name, in, want string
}{
	// Agreement on plain requests.
	{"get", "GET /a?b=1 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"pipelined", "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"post and pipelined", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"chunked with extension and trailer", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nT: 1\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"chunk size with trailing space", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n", ""},
	{"http/1.0", "GET / HTTP/1.0\r\n\r\n", ""},
	{"bare LF head", "GET / HTTP/1.1\nHost: h\n\n", ""},
	{"empty lines before", "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"expect continue", "POST /p HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nab", ""},
	{"unknown expect", "POST /p HTTP/1.1\r\nHost: h\r\nExpect: x\r\nContent-Length: 2\r\n\r\nab", ""},
	{"body cut short", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nab", ""},
	{"head cut short", "GET / HTTP/1.1\r\nHost: h\r\n", ""},
	{"ipv6 host", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", ""},
	{"full url http", "GET http://h:8/x?y=1 HTTP/1.1\r\nHost: h\r\n\r\n", ""},

	// Item 7: chunked framing as net/http reads it.
	{"bare LF after chunk size", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", ""},
	{"bare LF after chunk data", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n", ""},
	{"bare LF after last chunk", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\n\r\n", ""},
	{"bare LF ends the body", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\n", ""},
	{"CR inside a chunk line", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r;x\r\nhello\r\n0\r\n\r\n", ""},
	{"junk after chunk size", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\nhello\r\n0\r\n\r\n", ""},
	{"space before extension", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 ;a=b\r\nhello\r\n0\r\n\r\n", ""},
	{"0x chunk size", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", ""},
	{"malformed trailer", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nno colon\r\n\r\n", ""},
	{"trailer with bad name", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nA B: 1\r\n\r\n", "trailer as a head"},
	{"folded trailer", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nA: 1\r\n B\r\n\r\n", "obs-fold"},
	{"content-length with NBSP", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\u00a0\r\n\r\nabc", ""},
	{"content-length with NEL", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: \u00853\r\n\r\nabc", ""},
	{"content-length plus", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\nabc", ""},
	{"content-length 19 digits", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 1000000000000000000\r\n\r\nabc", ""},
	{"differing content-lengths", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", ""},
	{"many chunks across the read buffer", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("7;e=1\r\nabcdefg\r\n", 700) + "bb8\r\n" + strings.Repeat("z", 3000) + "\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"chunk longer than its size, after others", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n3\r\nabcX\r\n0\r\n\r\n", ""},
	{"blank then junk after a size", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n3\t \tx\r\nabc\r\n0\r\n\r\n", ""},
	{"extension then blanks", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1;a=\"b c\" \t\r\na\r\n0\r\n\r\n", ""},
	{"17 hex digits", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000001\r\na\r\n0\r\n\r\n", ""},
	{"16 hex digits", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0000000000000001\r\na\r\n0\r\n\r\n", ""},
	{"chunk size 2^60", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\nab", ""},
	{"chunk size 2^64", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\nab", ""},

	// Item 8 and 11: limits while reading.
	{"many empty fields", "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X:\r\n", 200) + "\r\n", "limits while reading"},
	{"long header line", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("a", 9000) + "\r\n\r\n", "limits while reading"},
	{"huge request line", "GET /" + strings.Repeat("a", 9000) + " HTTP/1.1\r\nHost: h\r\n\r\n", "limits while reading"},
	{"head over its budget", "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-"+strings.Repeat("b", 30)+": "+strings.Repeat("c", 7000)+"\r\n", 10) + "\r\n", ""},

	// The smuggling corpus: framing headers hidden or doubled.
	{"obs-fold", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", "obs-fold"},
	{"folded transfer-encoding", "POST / HTTP/1.1\r\nHost: h\r\nX: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", "obs-fold"},
	{"cl+te", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n", "cl+te"},
	{"te+cl", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n5c\r\nGPOST / HTTP/1.1\r\n\r\n0\r\n\r\n", "cl+te"},
	{"te identity", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", ""},
	{"te chunked, chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", ""},
	{"te gzip, chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", ""},
	{"two te headers", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n0\r\n\r\n", ""},
	{"te with space before colon", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", ""},
	{"te with tab value", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"te xchunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", ""},
	{"te in http/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", "cl+te"},
	{"te alone in http/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "te in http/1.0"},
	{"content-length with comma", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\nabc", ""},
	{"content-length negative", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", ""},
	{"NUL in a header", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", ""},
	{"CR alone in a header", "GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", ""},
	{"space before first header", "GET / HTTP/1.1\r\n Host: h\r\n\r\n", ""},
	{"HTTP/2.0 line", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", ""},
	{"HTTP/1.1 lowercase", "GET / http/1.1\r\nHost: h\r\n\r\n", ""},
	{"two spaces in request line", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", ""},

	// Item 13: Host, targets and methods as nginx has them.
	{"host with path", "GET / HTTP/1.1\r\nHost: evil.example/../x\r\n\r\n", ""},
	{"host ../../etc", "GET / HTTP/1.1\r\nHost: ../../etc\r\n\r\n", ""},
	{"host ..", "GET / HTTP/1.1\r\nHost: ..\r\n\r\n", "host as nginx"},
	{"host empty", "GET / HTTP/1.1\r\nHost: \r\n\r\n", "host as nginx"},
	{"host with backslash", "GET / HTTP/1.1\r\nHost: a\\b\r\n\r\n", ""},
	{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", ""},
	{"no host", "GET / HTTP/1.1\r\n\r\n", ""},
	{"full url with userinfo", "GET http://user:pw@h/x HTTP/1.1\r\nHost: h\r\n\r\n", "full url as nginx"},
	{"full url with bad host", "GET http://../x HTTP/1.1\r\nHost: h\r\n\r\n", "full url as nginx"},
	{"full url other scheme", "GET gopher://h/x HTTP/1.1\r\nHost: h\r\n\r\n", "full url as nginx"},
	{"GET *", "GET * HTTP/1.1\r\nHost: h\r\n\r\n", "asterisk only for OPTIONS"},
	{"CONNECT", "CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n", "CONNECT and TRACE"},
	{"CONNECT path", "CONNECT /x HTTP/1.1\r\nHost: h\r\n\r\n", "CONNECT and TRACE"},
	{"TRACE", "TRACE / HTTP/1.1\r\nHost: h\r\n\r\n", "CONNECT and TRACE"},
	{"lowercase method", "get / HTTP/1.1\r\nHost: h\r\n\r\n", "method as nginx"},
	{"odd method", "G~T / HTTP/1.1\r\nHost: h\r\n\r\n", "method as nginx"},
	{"custom method", "PROPFIND / HTTP/1.1\r\nHost: h\r\n\r\n", ""},

	// Item 3 of the review (issue 25): smuggling variants not tried before.
	{"two equal content-lengths", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"equal content-lengths, one padded", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length:  3 \r\n\r\nabcGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"content-lengths 3 and 03", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 03\r\n\r\nabcGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"content-length, empty one", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length:\r\n\r\nabc", ""},
	{"content-length with leading zeros past 19 digits", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 00000000000000000003\r\n\r\nabc", ""},
	{"content-length hex", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 0x3\r\n\r\nabc", ""},
	{"content-length 2^63", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 9223372036854775808\r\n\r\nabc", ""},
	{"te chunked, identity", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", ""},
	{"te identity, chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n", ""},
	{"te CHUNKED", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: CHUNKED\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"te name in capitals", "POST / HTTP/1.1\r\nHost: h\r\nTRANSFER-ENCODING: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"te padded with blanks", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \t chunked \t\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"te with vertical tab", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\x0b\r\n\r\n0\r\n\r\n", ""},
	{"te with form feed before", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\x0cchunked\r\n\r\n0\r\n\r\n", ""},
	{"te chunked;q=1", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked;q=1\r\n\r\n0\r\n\r\n", ""},
	{"te with comma only", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked,\r\n\r\n0\r\n\r\n", ""},
	{"te empty", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\nContent-Length: 3\r\n\r\nabc", ""},
	{"te empty in HTTP/0.0", "A / HTTP/0.0\r\nTransfer-Encoding:\r\n\r\n", ""},
	{"te chunked in HTTP/0.9", "GET / HTTP/0.9\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ""},
	{"te gzip in HTTP/2.0", "GET / HTTP/2.0\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", ""},
	{"te empty alone", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n\r\nabc", ""},
	{"te with a Kelvin sign for k", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chun\u212aed\r\n\r\n0\r\n\r\n", ""},
	{"connection with a long s", "GET /1 HTTP/1.1\r\nHost: h\r\nConnection: clo\u017fe\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"connection close and NBSP", "GET /1 HTTP/1.1\r\nHost: h\r\nConnection: close\u00a0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"quoted extension with a semicolon", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;a=\"x;y\"\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"quoted extension with a LF", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;a=\"x\ny\"\r\nabc\r\n0\r\n\r\n", ""},
	{"quoted extension with an escaped quote", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;a=\"x\\\"y\"\r\nabc\r\n0\r\n\r\n", ""},
	{"extension of 4 KiB", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;a=" + strings.Repeat("e", 4090) + "\r\nabc\r\n0\r\n\r\n", ""},
	{"extension of 3 KiB", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;a=" + strings.Repeat("e", 3000) + "\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"chunk line of 4095 bytes", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;a=" + strings.Repeat("e", 4089) + "\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"chunk line of 4096 bytes", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;a=" + strings.Repeat("e", 4090) + "\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"chunk line of 4097 bytes", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;a=" + strings.Repeat("e", 4091) + "\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"long chunk line across the read buffer after small chunks", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1\r\na\r\n", 500) + "3;a=" + strings.Repeat("e", 3000) + "\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"trailer line of 4096 bytes", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX: " + strings.Repeat("t", 4091) + "\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"trailer of 4096 bytes in two lines", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX: " + strings.Repeat("t", 2000) + "\r\nY: " + strings.Repeat("t", 2084) + "\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"trailer of 4097 bytes in two lines", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX: " + strings.Repeat("t", 2000) + "\r\nY: " + strings.Repeat("t", 2085) + "\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"trailer of 4 KiB lines", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n" + strings.Repeat("X: "+strings.Repeat("t", 4000)+"\r\n", 3) + "\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"101 trailer lines", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n" + strings.Repeat("X: 1\r\n", 101) + "\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", "limits while reading"},
	{"extensions outgrowing the data", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1;"+strings.Repeat("e", 1000)+"\r\na\r\n", 20) + "0\r\n\r\n", ""},
	{"trailer content-length", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nContent-Length: 40\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"trailer transfer-encoding", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nTransfer-Encoding: chunked\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"trailer then smuggled head", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\nGET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"last chunk with extension", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0;last=1\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"chunk size with leading space", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n 3\r\nabc\r\n0\r\n\r\n", ""},
	{"chunk size with sign", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n+3\r\nabc\r\n0\r\n\r\n", ""},
	{"chunk size -0", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n-0\r\n\r\n", ""},
	{"chunk data ends with LF LF", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\n\n0\r\n\r\n", ""},
	{"header name with @", "GET / HTTP/1.1\r\nHost: h\r\nX@Y: 1\r\n\r\n", ""},
	{"header name with a non-ASCII byte", "GET / HTTP/1.1\r\nHost: h\r\nX\xc3\xa9: 1\r\n\r\n", ""},
	{"header name with NUL", "GET / HTTP/1.1\r\nHost: h\r\nX\x00: 1\r\n\r\n", ""},
	{"header name with a tab before the colon", "GET / HTTP/1.1\r\nHost: h\r\nX\t: 1\r\n\r\n", ""},
	{"content-length name with a tab", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length\t: 3\r\n\r\nabc", ""},
	{"spaced name with a control byte in its value, HTTP/0.0", "A / HTTP/0.0\n0 :\a\n\n", ""},
	{"spaced name with NUL in its value", "GET / HTTP/1.1\r\nHost: h\r\nX Y: a\x00\r\n\r\n", ""},
	{"header name with quote", "GET / HTTP/1.1\r\nHost: h\r\nX\"Y: 1\r\n\r\n", ""},
	{"header name with slash", "GET / HTTP/1.1\r\nHost: h\r\nX/Y: 1\r\n\r\n", ""},
	{"empty header name", "GET / HTTP/1.1\r\nHost: h\r\n: 1\r\n\r\n", ""},
	{"NUL at the end of a value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x00\r\n\r\n", ""},
	{"DEL in a value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x7fb\r\n\r\n", ""},
	{"non-ASCII in a value", "GET / HTTP/1.1\r\nHost: h\r\nX: \xff\xfe\r\n\r\n", ""},
	{"CR before a bare LF in the head", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\r\n\r\n", ""},
	{"NUL in Host", "GET / HTTP/1.1\r\nHost: h\x00x\r\n\r\n", ""},
	{"CR in the request line", "GET /a\rb HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"NUL in the request line", "GET /a\x00b HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"tab in the request line", "GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"HTTP/1.0 keep-alive pipelined", "GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /3 HTTP/1.0\r\n\r\nGET /4 HTTP/1.0\r\n\r\n", ""},
	{"HTTP/1.0 POST keep-alive", "POST /1 HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.0\r\n\r\n", ""},
	{"HTTP/1.1 connection close then more", "GET /1 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"connection close among tokens", "GET /1 HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, CLOSE\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"expect continue, chunked", "POST /p HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"expect continue then a word", "POST /p HTTP/1.1\r\nHost: h\r\nExpect: 100-continue x\r\nContent-Length: 2\r\n\r\nabGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"expect a word then continue", "POST /p HTTP/1.1\r\nHost: h\r\nExpect: x\t100-continue\r\nContent-Length: 2\r\n\r\nabGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"expect continue glued to a word", "POST /p HTTP/1.1\r\nHost: h\r\nExpect: 100-continuex\r\nContent-Length: 2\r\n\r\nab", ""},
	{"expect continue in HTTP/1.0 with a word", "AAAA /0 HTTP/1.0\r\nEXpeCt: 100-ContiNue 00\r\n\r\n", ""},
	{"connection keep-alive in a second header in HTTP/1.0", "GET /1 HTTP/1.0\r\nConnection: x\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n", ""},
	{"connection close in a second header", "GET /1 HTTP/1.1\r\nHost: h\r\nConnection: x\r\nConnection: close\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"connection close x in a second header", "GET /1 HTTP/1.1\r\nHost: h\r\nConnection: x\r\nConnection: close x\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"connection close then a word", "GET /1 HTTP/1.1\r\nHost: h\r\nConnection: close x\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"connection keep-alive then a word in HTTP/1.0", "GET /1 HTTP/1.0\r\nConnection: keep-alive x\r\n\r\nGET /2 HTTP/1.0\r\n\r\n", ""},
	{"expect continue in capitals", "POST /p HTTP/1.1\r\nHost: h\r\nExpect: 100-CONTINUE\r\nContent-Length: 2\r\n\r\nabGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	{"host with port only", "GET / HTTP/1.1\r\nHost: :80\r\n\r\n", "host as nginx"},
	{"host with percent", "GET / HTTP/1.1\r\nHost: a%2e%2e\r\n\r\n", ""},
	{"full url with escaped host", "GET http://a%C3%A9/x HTTP/1.1\r\nHost: h\r\n\r\n", "full url as nginx"},
	{"full url https", "GET https://h/x HTTP/1.1\r\nHost: other\r\n\r\n", ""},
	{"full url no path, query", "GET http://h?x=1 HTTP/1.1\r\nHost: h\r\n\r\n", ""},
}

func TestDifferentialWithNetHTTP(t *testing.T) {
	names := map[string]bool{}
	for _, d := range deliberateDifferences {
		names[d.name] = true
	}
	for _, tc := range diffCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want != "" && !names[tc.want] {
				t.Fatalf("no deliberate difference named %q", tc.want)
			}
			in := []byte(tc.in)
			h1, std := runHTTP1(in), runNetHTTP(in)
			got, err := compareOutcomes(in, h1, std)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && got != "" {
				t.Fatalf("http1 differs (%s) where it must agree:\nhttp1:    %+v %v\nnet/http: %+v %v", got, h1.reqs, h1.statuses, std.reqs, std.statuses)
			}
			if tc.want != "" && got == "" {
				t.Fatalf("both servers agree where http1 is meant to be stricter (%s):\nhttp1:    %+v %v\nnet/http: %+v %v", tc.want, h1.reqs, h1.statuses, std.reqs, std.statuses)
			}
		})
	}
}

// FuzzDifferential: for any bytes, http1 serves exactly the requests net/http serves, or a
// prefix of them followed by a refusal that a deliberate difference explains.
func FuzzDifferential(f *testing.F) {
	for _, tc := range diffCases {
		if len(tc.in) <= 4096 {
			f.Add([]byte(tc.in))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 16<<10 {
			return
		}
		if _, err := compareOutcomes(in, runHTTP1(in), runNetHTTP(in)); err != nil {
			t.Fatal(err)
		}
	})
}
