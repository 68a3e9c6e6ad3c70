package http1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
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

var (
	errHeadTooLarge  = &statusError{http.StatusRequestHeaderFieldsTooLarge, ""}
	errTooManyFields = &statusError{http.StatusRequestHeaderFieldsTooLarge, "too many header fields"}
	errURITooLong    = &statusError{http.StatusRequestURITooLong, ""}
	errHeaderName    = badRequest("invalid header name")
	errHeaderValue   = badRequest("invalid header value")
)

// headReader reads the lines of one request head within its limits, as it reads them: a
// line past its limit, a field past the count or a head past its budget is refused before
// more of it is read or kept, so that a head costs at most its budget, whatever its shape.
type headReader struct {
	left       int         // the head's budget, bytes
	fieldsLeft int         // header fields still allowed
	long       []byte      // a line longer than the read buffer, gathered
	raw        []byte      // the header values of the head being read, one after the other
	lines      []fieldLine // the header fields of the head being read
	began      bool        // a byte of this head was read: its end is no longer a client that left
	// nameErr is a header name with a space in it: net/http reads such a line and refuses
	// it late (frame), where other malformed lines end the head at once.
	nameErr error
}

// line returns the next line without its end (LF or CRLF), refusing with tooLong one longer
// than max bytes; it is valid until the next read.
func (h *headReader) line(br *bufio.Reader, max int, tooLong error) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if len(line) > 0 {
		h.began = true
	}
	if err == bufio.ErrBufferFull {
		buf := append(h.long[:0], line...)
		for err == bufio.ErrBufferFull {
			switch {
			case len(buf) > max:
				return nil, tooLong
			case len(buf) > h.left:
				return nil, errHeadTooLarge
			}
			line, err = br.ReadSlice('\n')
			buf = append(buf, line...)
		}
		h.long, line = buf, buf
	}
	h.left -= len(line)
	switch {
	case h.left < 0:
		return nil, errHeadTooLarge
	case len(line) > max+2:
		return nil, tooLong
	}
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) > max {
		return nil, tooLong
	}
	return line, nil
}

// readRequest reads a request head into r, without its context, and returns its body (nil when
// it has none). A head that cannot be served is a *statusError; any other error
// (the client left, the header timeout) ends the connection without an answer.
func (c *conn) readRequest(r *http.Request) (*body, error) {
	h := &c.head
	h.left, h.fieldsLeft, h.began = c.s.maxHeaderBytes(), c.s.maxHeaderFields(), false
	// No empty lines before the request line (net/http refuses them too, as a 400).
	line, err := h.line(c.br, c.s.maxRequestLine(), errURITooLong)
	if err != nil {
		return nil, h.cutShort(err)
	}
	// A malformed line is refused at once; a well-formed one that is not served (505, 405)
	// once the head is read, in net/http's order (frame), so that a head with several faults
	// gets the same refusal from both.
	lineErr := parseRequestLine(r, string(line))
	if se, ok := lineErr.(*statusError); ok && se.code == http.StatusBadRequest {
		return nil, lineErr
	}
	if err := h.fields(c.br, c.s.maxFieldLine()); err != nil {
		return nil, h.cutShort(err)
	}
	r.Header = h.header()
	r.RemoteAddr, r.TLS = c.remote, c.tls
	return c.frame(r, lineErr, h.nameErr)
}

// cutShort turns the end of the input within a head that began into a 400, as net/http
// answers it: the client may have closed only its sending side, and still read.
func (h *headReader) cutShort(err error) error {
	if err == io.EOF && h.began {
		return badRequest("the request head ends before its empty line")
	}
	return err
}

// parseRequestLine fills in r's method, target and version from "GET /path HTTP/1.1". It
// refuses, as nginx does, a method of other than A-Z, '_' and '-' (400), CONNECT and TRACE
// (405), `*` for any method but OPTIONS, and a full URL that is not http(s), carries
// user:password or names a host no Host header could (400). For a full URL, RequestURI is its
// path and query, as the origin form would have said it (nginx's $request_uri).
func parseRequestLine(r *http.Request, line string) error {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || target == "" {
		return badRequest("malformed request line")
	}
	if !isMethod(method) {
		return badRequest("invalid method")
	}
	if method == http.MethodConnect || method == http.MethodTrace {
		return &statusError{http.StatusMethodNotAllowed, method + " is not served here"}
	}
	major, minor := 1, 1
	switch proto {
	case "HTTP/1.1":
	case "HTTP/1.0":
		minor = 0
	default:
		var ok bool
		if major, minor, ok = http.ParseHTTPVersion(proto); !ok {
			return badRequest("malformed HTTP version")
		}
		proto = "HTTP/" + strconv.Itoa(major) + "." + strconv.Itoa(minor)
	}
	r.ProtoMajor, r.ProtoMinor = major, minor
	r.Method, r.Proto, r.RequestURI = method, proto, target
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return badRequest("malformed request target")
	}
	r.URL = u
	if major != 1 {
		// After the target, as net/http checks them (HTTP/2's preface included).
		return &statusError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
	}
	switch {
	case target == "*":
		if method != http.MethodOptions {
			return badRequest("the target * is only for OPTIONS")
		}
	case target[0] != '/':
		path, err := absoluteTarget(target)
		if err != nil {
			return err
		}
		if !validHost(u.Host) {
			// The URL package unescapes the host ("a%C3%A9" is "aé"): the host PHP gets
			// must be one a Host header could carry.
			return badRequest("malformed host in the request line")
		}
		r.RequestURI = path
	}
	return nil
}

// absoluteTarget checks a full URL in a request line (RFC 9112 3.2.2) and returns its path
// and query.
func absoluteTarget(target string) (string, error) {
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok || !asciiEqualFold(scheme, "http") && !asciiEqualFold(scheme, "https") {
		return "", badRequest("a full URL in the request line must be http or https")
	}
	authority, path := rest, "/"
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, path = rest[:i], rest[i:]
		if path[0] != '/' {
			path = "/" + path
		}
	}
	if strings.IndexByte(authority, '@') >= 0 {
		return "", badRequest("a full URL in the request line carries user:password")
	}
	if !validHost(authority) {
		return "", badRequest("malformed host in the request line")
	}
	return path, nil
}

// fields reads the header lines of a head up to the empty line that ends it, into h.raw and
// h.lines, refusing a line longer than max or more fields than h.fieldsLeft with 431.
func (h *headReader) fields(br *bufio.Reader, max int) error {
	h.raw, h.lines, h.nameErr = h.raw[:0], h.lines[:0], nil
	for {
		line, err := h.line(br, max, errHeadTooLarge)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		if h.fieldsLeft--; h.fieldsLeft < 0 {
			return errTooManyFields
		}
		key, v, err := splitField(line)
		if err == errHeaderName && spacedName(line) {
			// Its value is checked as it is read, as net/http's reader does.
			if _, v, _ := bytes.Cut(line, []byte(":")); !validValue(v) {
				return errHeaderValue
			}
			h.nameErr = err
			continue
		}
		if err != nil {
			return err
		}
		h.raw = append(h.raw, v...)
		h.lines = append(h.lines, fieldLine{key, len(h.raw) - len(v), len(h.raw)})
	}
}

// spacedName reports whether a header line's name is a token but for spaces in it, which
// net/http's reader takes and its server refuses once the head is read.
func spacedName(line []byte) bool {
	name, _, _ := bytes.Cut(line, []byte(":"))
	spaced := false
	for _, ch := range name {
		if ch == ' ' {
			spaced = true
		} else if !tokenChar[ch] {
			return false
		}
	}
	return spaced
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
		return "", nil, errHeaderName
	}
	v := line[i+1:]
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	if !validValue(v) {
		return "", nil, errHeaderValue
	}
	return key, v, nil
}

// validValue reports whether a header value holds no control byte but tabs.
func validValue(v []byte) bool {
	for _, ch := range v {
		if ch < ' ' && ch != '\t' || ch == 0x7f {
			return false
		}
	}
	return true
}

// frame reads the framing headers of r's head (Host, Content-Length, Transfer-Encoding,
// Connection, Expect) and returns its body, refusing what is ambiguous or unsupported.
func (c *conn) frame(r *http.Request, lineErr, nameErr error) (*body, error) {
	// In net/http's order, so that a head with several faults gets the same refusal: several
	// Host headers, then the body's framing, then a missing or malformed Host.
	hosts, hasHost := r.Header["Host"]
	if len(hosts) > 1 {
		return nil, badRequest("too many Host headers")
	}
	// As net/http's server decides it: HTTP/1.0 keeps the connection when the first
	// Connection header holds keep-alive between blanks or commas (wantsHttp10KeepAlive),
	// HTTP/1.1 closes it when any holds the item close, or the first holds the word.
	conns := r.Header["Connection"]
	first := ""
	if len(conns) > 0 {
		first = conns[0]
	}
	if r.ProtoMinor == 0 {
		r.Close = !containsToken(first, "keep-alive")
	} else {
		r.Close = hasToken(conns, "close") || containsToken(first, "close")
	}

	te, hasTE := r.Header["Transfer-Encoding"]
	cls, hasCL := r.Header["Content-Length"]
	var b *body
	switch {
	case hasTE && r.ProtoMajor == 1 && r.ProtoMinor == 0:
		return nil, badRequest("Transfer-Encoding in an HTTP/1.0 request")
	case hasTE && (len(te) != 1 || !asciiEqualFold(te[0], "chunked")):
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
			b = &body{c: c}
			b.remain.Store(n)
		}
	}
	switch {
	case lineErr != nil:
		return nil, lineErr
	case !hasHost && r.ProtoMinor >= 1:
		return nil, badRequest("missing required Host header")
	case hasHost && !validHost(hosts[0]):
		return nil, badRequest("malformed Host header")
	}
	if nameErr != nil {
		return nil, nameErr
	}
	delete(r.Header, "Host")
	r.Host = r.URL.Host // a full URL's, checked by absoluteTarget
	if r.Host == "" && hasHost {
		r.Host = hosts[0]
	}
	if b == nil {
		r.Body = http.NoBody
	} else {
		r.Body = b
	}

	// As net/http: the first Expect header counts, an empty one is none.
	if expect := r.Header["Expect"]; len(expect) > 0 {
		switch {
		case containsToken(expect[0], "100-continue"):
			if r.ProtoMinor >= 1 && b != nil {
				b.needContinue = true
			}
		case expect[0] != "":
			return nil, &statusError{http.StatusExpectationFailed, "unsupported Expect header"}
		}
	}
	return b, nil
}

// contentLength parses the Content-Length values of a request: ASCII digits only (no sign, no
// space of any kind: splitField trimmed the blanks around it), leading zeros of any number (as
// net/http and nginx take them), at most 2^63-1, and every copy the same.
func contentLength(values []string) (int64, error) {
	first := values[0]
	for _, v := range values[1:] {
		if v != first {
			return 0, badRequest("differing Content-Length headers")
		}
	}
	if first == "" {
		return 0, badRequest("invalid Content-Length")
	}
	for i := 0; i < len(first); i++ {
		if ch := first[i]; ch < '0' || ch > '9' {
			return 0, badRequest("invalid Content-Length")
		}
	}
	digits := strings.TrimLeft(first, "0")
	if len(digits) > 19 {
		return 0, badRequest("invalid Content-Length")
	}
	var n uint64
	for i := 0; i < len(digits); i++ {
		n = n*10 + uint64(digits[i]-'0')
	}
	if n > math.MaxInt64 {
		return 0, badRequest("invalid Content-Length")
	}
	return int64(n), nil
}

// hasToken reports whether a comma-separated header holds token, in any ASCII case.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for v != "" {
			var item string
			item, v, _ = strings.Cut(v, ",")
			if asciiEqualFold(strings.Trim(item, " \t"), token) {
				return true
			}
		}
	}
	return false
}

// containsToken reports whether v holds token between blanks, commas or its ends, in any
// ASCII case: net/http's test of Expect ("100-continue x" expects a 100 there, where a
// comma-separated item would not be it, and answering 417 refuses what net/http serves).
func containsToken(v, token string) bool {
	boundary := func(b byte) bool { return b == ' ' || b == ',' || b == '\t' }
	for sp := 0; sp+len(token) <= len(v); sp++ {
		end := sp + len(token)
		if (sp == 0 || boundary(v[sp-1])) && (end == len(v) || boundary(v[end])) && asciiEqualFold(v[sp:end], token) {
			return true
		}
	}
	return false
}

// asciiEqualFold reports whether s and t are equal but for the case of ASCII letters. Framing
// tokens are compared so, as net/http does: strings.EqualFold also folds Unicode, which would
// take "chun\u212aed" (a Kelvin sign for the k) for chunked, where any other reader does not.
func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
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

var tokenChar = byteSet("!#$%&'*+-.^_`|~")

// byteSet returns the set of ASCII digits, letters and the bytes of extra.
func byteSet(extra string) (t [256]bool) {
	for ch := '0'; ch <= '9'; ch++ {
		t[ch] = true
	}
	for ch := 'a'; ch <= 'z'; ch++ {
		t[ch], t[ch-'a'+'A'] = true, true
	}
	for _, ch := range extra {
		t[ch] = true
	}
	return t
}

// isMethod reports whether s is a method nginx would take: A-Z, '_' and '-'.
func isMethod(s string) bool {
	for i := 0; i < len(s); i++ {
		if ch := s[i]; (ch < 'A' || ch > 'Z') && ch != '_' && ch != '-' {
			return false
		}
	}
	return s != ""
}

// validHost reports whether a Host header (or a full URL's authority) is one net/http and
// nginx both take: the bytes of a host and port (httpguts.ValidHostHeader), and a name
// (ngx_http_validate_host): not empty, no "..", no '/' or '\\'. It reaches PHP as HTTP_HOST,
// which applications build paths and links from.
func validHost(h string) bool {
	name := h
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			name = h[:i+1]
		}
	} else if i := strings.IndexByte(h, ':'); i >= 0 {
		name = h[:i]
	}
	if strings.TrimSuffix(name, ".") == "" || strings.Contains(name, "..") {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !hostChar[h[i]] {
			return false
		}
	}
	return true
}

// hostChar holds the bytes of a valid Host: RFC 3986's unreserved, sub-delims, '%' of
// pct-encoding, ':' and the brackets of an IPv6 literal (as httpguts has them).
var hostChar = byteSet("-._~!$&'()*+,;=%:[]")

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
