package http1

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// statusError is a request refused before its handler: the status and what the client is told.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return strconv.Itoa(e.code) + " " + e.msg }

func badRequest(msg string) error { return &statusError{http.StatusBadRequest, msg} }

var errHeadTooLarge = &statusError{http.StatusRequestHeaderFieldsTooLarge, ""}

// headReader reads the lines of one request head within a budget of bytes.
type headReader struct {
	left  int
	long  []byte      // a line longer than the read buffer, gathered
	raw   []byte      // the header values of the head being read, one after the other
	lines []fieldLine // the header fields of the head being read
}

// line returns the next line without its end (LF or CRLF); it is valid until the next read.
func (h *headReader) line(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		buf := append(h.long[:0], line...)
		for err == bufio.ErrBufferFull {
			if len(buf) > h.left {
				return nil, errHeadTooLarge
			}
			line, err = br.ReadSlice('\n')
			buf = append(buf, line...)
		}
		h.long, line = buf, buf
	}
	h.left -= len(line)
	if h.left < 0 {
		return nil, errHeadTooLarge
	}
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readRequest reads a request head into r, without its context, and returns its body (nil when
// it has none). A head that cannot be served is a *statusError; any other error
// (the client left, the header timeout) ends the connection without an answer.
func (c *conn) readRequest(r *http.Request) (*body, error) {
	h := &c.head
	h.left = c.s.MaxHeaderBytes
	if h.left <= 0 {
		h.left = defaultMaxHeaderBytes
	}
	var line []byte
	var err error
	for range 4 { // RFC 9112 2.2: empty lines before a request line are ignored
		if line, err = h.line(c.br); err != nil || len(line) > 0 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if err := parseRequestLine(r, string(line)); err != nil {
		return nil, err
	}
	if err := h.fields(c.br); err != nil {
		return nil, err
	}
	r.Header = h.header()
	r.RemoteAddr, r.TLS = c.remote, c.tls
	return c.frame(r)
}

// parseRequestLine fills in r's method, target and version from "GET /path HTTP/1.1".
func parseRequestLine(r *http.Request, line string) error {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || target == "" {
		return badRequest("malformed request line")
	}
	if !isToken(method) {
		return badRequest("invalid method")
	}
	switch proto {
	case "HTTP/1.1":
		r.ProtoMajor, r.ProtoMinor = 1, 1
	case "HTTP/1.0":
		r.ProtoMajor, r.ProtoMinor = 1, 0
	default:
		major, minor, ok := http.ParseHTTPVersion(proto)
		if !ok {
			return badRequest("malformed HTTP version")
		}
		if major != 1 {
			return &statusError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
		}
		r.ProtoMajor, r.ProtoMinor = major, minor
		proto = "HTTP/1." + strconv.Itoa(minor)
	}
	r.Method, r.Proto, r.RequestURI = method, proto, target
	// CONNECT names an authority, which does not parse as a URL alone.
	authority := method == "CONNECT" && target[0] != '/'
	raw := target
	if authority {
		raw = "http://" + raw
	}
	u, err := url.ParseRequestURI(raw)
	if err != nil {
		return badRequest("malformed request target")
	}
	if authority {
		u.Scheme = ""
	}
	r.URL = u
	return nil
}

// fields reads the header lines of a head up to the empty line that ends it, into h.raw and
// h.lines.
func (h *headReader) fields(br *bufio.Reader) error {
	h.raw, h.lines = h.raw[:0], h.lines[:0]
	for {
		line, err := h.line(br)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		key, v, err := splitField(line)
		if err != nil {
			return err
		}
		h.raw = append(h.raw, v...)
		h.lines = append(h.lines, fieldLine{key, len(h.raw) - len(v), len(h.raw)})
	}
}

// header returns the fields read as a Header. Its values are slices of one string, and its
// value lists of one array, as net/http allocates them: three allocations for any head.
func (h *headReader) header() http.Header {
	all := string(h.raw)
	values := make([]string, len(h.lines))
	hdr := make(http.Header, len(h.lines))
	for i, l := range h.lines {
		values[i] = all[l.start:l.end]
		if vs, ok := hdr[l.key]; ok {
			hdr[l.key] = append(vs, values[i])
		} else {
			hdr[l.key] = values[i : i+1 : i+1]
		}
	}
	if cap(h.raw) > maxKeptScratch || cap(h.lines) > maxKeptScratch/16 || cap(h.long) > maxKeptScratch {
		h.raw, h.lines, h.long = nil, nil, nil // a huge head's scratch is not kept for the connection's life
	}
	return hdr
}

// maxKeptScratch bounds the header scratch a connection keeps between requests.
const maxKeptScratch = 16 << 10

// fieldLine is one header field of a head: its name, and where its value is in headReader.raw.
type fieldLine struct {
	key        string
	start, end int
}

// splitField splits a header line into its canonical name and its value, checked.
func splitField(line []byte) (string, []byte, error) {
	if line[0] == ' ' || line[0] == '\t' {
		// net/http would join it to the line before; a proxy in front may not (smuggling).
		return "", nil, badRequest("a header folded over several lines (obs-fold)")
	}
	i := bytes.IndexByte(line, ':')
	if i <= 0 {
		return "", nil, badRequest("malformed header line")
	}
	key, ok := canonicalKey(line[:i])
	if !ok {
		return "", nil, badRequest("invalid header name")
	}
	v := line[i+1:]
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	for _, ch := range v {
		if ch < ' ' && ch != '\t' || ch == 0x7f {
			return "", nil, badRequest("invalid header value")
		}
	}
	return key, v, nil
}

// frame reads the framing headers of r's head (Host, Content-Length, Transfer-Encoding,
// Connection, Expect) and returns its body, refusing what is ambiguous or unsupported.
func (c *conn) frame(r *http.Request) (*body, error) {
	hosts, hasHost := r.Header["Host"]
	switch {
	case len(hosts) > 1:
		return nil, badRequest("too many Host headers")
	case !hasHost && r.ProtoMinor >= 1:
		return nil, badRequest("missing required Host header")
	case hasHost && !validHost(hosts[0]):
		return nil, badRequest("malformed Host header")
	}
	delete(r.Header, "Host")
	r.Host = r.URL.Host
	if r.Host == "" && hasHost {
		r.Host = hosts[0]
	}

	conns := r.Header["Connection"]
	if r.ProtoMinor == 0 {
		r.Close = !hasToken(conns, "keep-alive")
	} else {
		r.Close = hasToken(conns, "close")
	}

	te, hasTE := r.Header["Transfer-Encoding"]
	cls, hasCL := r.Header["Content-Length"]
	var b *body
	switch {
	case hasTE && r.ProtoMinor == 0:
		return nil, badRequest("Transfer-Encoding in an HTTP/1.0 request")
	case hasTE && (len(te) != 1 || !strings.EqualFold(te[0], "chunked")):
		return nil, &statusError{http.StatusNotImplemented, "unsupported transfer encoding"}
	case hasTE && hasCL:
		return nil, badRequest("both Content-Length and Transfer-Encoding: the body's length is ambiguous")
	case hasTE:
		delete(r.Header, "Transfer-Encoding")
		r.TransferEncoding = []string{"chunked"}
		r.ContentLength = -1
		b = &body{c: c, chunked: true}
	case hasCL:
		n, err := contentLength(cls)
		if err != nil {
			return nil, err
		}
		if len(cls) > 1 {
			r.Header["Content-Length"] = cls[:1]
		}
		r.ContentLength = n
		if n > 0 {
			b = &body{c: c, remain: n}
		}
	}
	if b == nil {
		r.Body = http.NoBody
	} else {
		r.Body = b
	}

	if expect, ok := r.Header["Expect"]; ok {
		if len(expect) == 1 && strings.EqualFold(expect[0], "100-continue") {
			if r.ProtoMinor >= 1 && b != nil {
				b.needContinue = true
			}
		} else {
			return nil, &statusError{http.StatusExpectationFailed, "unsupported Expect header"}
		}
	}
	return b, nil
}

// contentLength parses the Content-Length values of a request: digits only, and every copy
// the same.
func contentLength(values []string) (int64, error) {
	first := strings.TrimSpace(values[0])
	for _, v := range values[1:] {
		if strings.TrimSpace(v) != first {
			return 0, badRequest("differing Content-Length headers")
		}
	}
	if first == "" || len(first) > 18 {
		return 0, badRequest("invalid Content-Length")
	}
	var n int64
	for i := 0; i < len(first); i++ {
		ch := first[i]
		if ch < '0' || ch > '9' {
			return 0, badRequest("invalid Content-Length")
		}
		n = n*10 + int64(ch-'0')
	}
	return n, nil
}

// hasToken reports whether a comma-separated header holds token, in any case.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for v != "" {
			var item string
			item, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(item), token) {
				return true
			}
		}
	}
	return false
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChar[s[i]] {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [256]bool) {
	for ch := '0'; ch <= '9'; ch++ {
		t[ch] = true
	}
	for ch := 'a'; ch <= 'z'; ch++ {
		t[ch], t[ch-'a'+'A'] = true, true
	}
	for _, ch := range "!#$%&'*+-.^_`|~" {
		t[ch] = true
	}
	return t
}()

// validHost reports whether a Host header's bytes are ones a host (and port) may hold, as
// net/http checks them.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		ch := h[i]
		if ch <= ' ' || ch >= 0x7f || strings.IndexByte("\"<>\\^`{|}", ch) >= 0 {
			return false
		}
	}
	return true
}

// canonicalKey returns a header name in its canonical form (content-type: Content-Type), the
// common ones without allocating, or false when it is not a token.
func canonicalKey(name []byte) (string, bool) {
	if len(name) > 256 {
		if !isToken(string(name)) {
			return "", false
		}
		return http.CanonicalHeaderKey(string(name)), true
	}
	var buf [256]byte
	upper := true
	for i, ch := range name {
		if !tokenChar[ch] {
			return "", false
		}
		switch {
		case upper && 'a' <= ch && ch <= 'z':
			ch -= 'a' - 'A'
		case !upper && 'A' <= ch && ch <= 'Z':
			ch += 'a' - 'A'
		}
		buf[i] = ch
		upper = ch == '-'
	}
	k := buf[:len(name)]
	if s, ok := commonKeys[string(k)]; ok {
		return s, true
	}
	return string(k), true
}

var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Authorization",
		"Cache-Control", "Connection", "Content-Length", "Content-Type", "Cookie", "Expect",
		"Host", "If-Modified-Since", "If-None-Match", "Origin", "Pragma", "Referer",
		"Transfer-Encoding", "Upgrade", "Upgrade-Insecure-Requests", "User-Agent",
		"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Real-Ip",
		"X-Requested-With", "Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site",
		"Dnt", "Te", "Range", "If-Range", "Priority",
	} {
		m[k] = k
	}
	return m
}()

var errClosedBody = errors.New("http1: read on a body after its request ended")
