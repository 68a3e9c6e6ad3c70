// Package compress compresses HTTP responses on the fly with zstd, brotli or gzip, as negotiated
// from the request's Accept-Encoding (Negotiate), for responses worth it: a compressible type, at
// least MinSize bytes, nothing that forbids it. It is an http.Handler middleware (Compress) that
// keeps streaming intact: a Flush reaches the client with everything written before it.
package compress

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// MinSize is the smallest body compressed, in bytes. Below it the coding's framing and the
// client's work cost more than the bytes saved (a TCP segment carries about 1400 bytes anyway);
// nginx's gzip_min_length is 20, Caddy's minimum_length 512, Cloudflare's 48.
const MinSize = 1024

// Codings lists the content codings Compress knows, in the order it prefers them by default.
var Codings = []string{"zstd", "br", "gzip"}

// Compress returns a handler that runs h and compresses its responses with the first of
// encodings (a subset of Codings, in the server's order of preference; unknown names are
// ignored) that the client accepts best (Negotiate). With no known coding it returns h itself.
//
// A response is compressed when all of these hold:
//   - the request is not HEAD, and the status is 200 or above and none of 204, 206 and 304;
//   - the handler set no Content-Encoding (so nothing is ever compressed twice: a precompressed
//     file keeps its coding), no Content-Range, and no Cache-Control: no-transform;
//   - its Content-Type (sniffed from the first bytes as net/http does when the handler set
//     none) is compressible: text/*, JSON, JavaScript, XML, SVG, wasm, ... (Compressible);
//   - its Content-Length, or when the handler set none, the bytes written before the handler
//     returned or first flushed, is at least MinSize; a response flushed before MinSize bytes
//     without a Content-Length is a stream of unknown length and is compressed.
//
// Such a response carries Vary: Accept-Encoding whether or not this client accepted a coding,
// merged into the handler's own Vary header (AddVary) rather than sent as a second line.
// A compressed one loses its Content-Length and Accept-Ranges, gets its Content-Encoding, and
// its strong ETag becomes weak (W/"..."), since the bytes differ from the identity ones.
//
// The ResponseWriter h receives implements http.Flusher (a Flush compresses and sends what was
// written so far) and io.ReaderFrom (sendfile stays possible for a response left uncompressed),
// and unwraps to the original for http.ResponseController. A 1xx status (103 Early Hints)
// passes through at once. Encoders are pooled: memory held is one encoder per response being
// compressed (with windows capped at 1 MiB for zstd and 512 KiB for brotli), and idle ones are
// released by the garbage collector.
func Compress(h http.Handler, encodings []string) http.Handler {
	var offered []string
	for _, e := range encodings {
		if slices.Contains(Codings, e) && !slices.Contains(offered, e) {
			offered = append(offered, e)
		}
	}
	if len(offered) == 0 {
		return h
	}
	return &handler{next: h, offered: offered}
}

type handler struct {
	next    http.Handler
	offered []string
}

var writers = sync.Pool{New: func() any { return new(writer) }}

func (c *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		c.next.ServeHTTP(w, r)
		return
	}
	cw := writers.Get().(*writer)
	*cw = writer{w: w, coding: Negotiate(r.Header.Get("Accept-Encoding"), c.offered), buf: cw.buf[:0]}
	c.next.ServeHTTP(cw, r)
	// Not deferred: after a panic the writer's state is unknown, and it is left to the
	// garbage collector rather than reused.
	cw.finish()
	buf := cw.buf
	if cap(buf) > 2*MinSize {
		buf = nil
	}
	*cw = writer{buf: buf[:0]}
	writers.Put(cw)
}

// writer is the ResponseWriter the wrapped handler sees. Until it decides whether to compress
// (decide), it holds back the status and up to MinSize bytes of body:
//
//	undecided --(status and Content-Length known, or MinSize bytes, or Flush, or the end)--> decided
//
// Once decided it writes through the encoder (enc) or straight to w.
type writer struct {
	w       http.ResponseWriter
	coding  string // the negotiated coding, "" for identity
	status  int    // the status the handler wrote, 0 before
	decided bool
	enc     encoder // nil when not compressing
	buf     []byte  // body held back while undecided
}

var (
	_ http.ResponseWriter = (*writer)(nil)
	_ http.Flusher        = (*writer)(nil)
	_ io.ReaderFrom       = (*writer)(nil)
)

func (cw *writer) Header() http.Header { return cw.w.Header() }

// Unwrap returns the original ResponseWriter, for http.ResponseController.
func (cw *writer) Unwrap() http.ResponseWriter { return cw.w }

func (cw *writer) WriteHeader(code int) {
	if cw.status != 0 {
		return // superfluous, as net/http ignores it
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		cw.w.WriteHeader(code) // informational: 103 Early Hints, 100 Continue
		return
	}
	cw.status = code
	h := cw.w.Header()
	if _, sized := h["Content-Length"]; sized {
		cw.decide(false, nil) // the size is known: nothing to wait for
		return
	}
	if _, typed := h["Content-Type"]; !typed {
		return // the type is sniffed from the body
	}
	if !cw.eligible(nil) {
		cw.decide(false, nil)
	}
}

func (cw *writer) Write(p []byte) (int, error) {
	if cw.status == 0 {
		cw.WriteHeader(http.StatusOK)
	}
	if !cw.decided {
		if len(cw.buf)+len(p) < MinSize {
			cw.buf = append(cw.buf, p...)
			return len(p), nil
		}
		cw.decide(false, p)
	}
	if cw.enc != nil {
		return cw.enc.Write(p)
	}
	return cw.w.Write(p)
}

// ReadFrom lets io.Copy into the writer (http.ServeContent does that) reach the original's
// ReadFrom, and so sendfile, when the response is not compressed.
func (cw *writer) ReadFrom(src io.Reader) (int64, error) {
	if cw.status == 0 {
		cw.WriteHeader(http.StatusOK)
	}
	if !cw.decided {
		// Without a Content-Length the size is known only by reading.
		return io.Copy(writeOnly{cw}, src)
	}
	if cw.enc != nil {
		return io.Copy(cw.enc, src)
	}
	if rf, ok := cw.w.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(cw.w, src)
}

// writeOnly hides writer's ReadFrom from io.Copy.
type writeOnly struct{ io.Writer }

// Flush sends everything written so far to the client, compressing it first when the response
// is compressed.
func (cw *writer) Flush() {
	if cw.status == 0 {
		cw.WriteHeader(http.StatusOK)
	}
	if !cw.decided {
		cw.decide(true, nil)
	}
	if cw.enc != nil {
		if err := cw.enc.Flush(); err != nil {
			return
		}
	}
	_ = http.NewResponseController(cw.w).Flush()
}

// finish ends the response after the handler returned: it decides if the handler never wrote
// enough to, and closes the encoder.
func (cw *writer) finish() {
	if cw.status == 0 && len(cw.buf) == 0 {
		return // nothing written: net/http sends its empty 200
	}
	if !cw.decided {
		if cw.status == 0 {
			cw.status = http.StatusOK
		}
		cw.decide(false, nil)
	}
	if cw.enc != nil {
		_ = cw.enc.Close()
		putEncoder(cw.coding, cw.enc)
		cw.enc = nil
	}
}

// eligible reports whether the response may be compressed, its size aside. next is a write
// about to follow the held-back bytes, for sniffing the type.
func (cw *writer) eligible(next []byte) bool {
	switch s := cw.status; {
	case s < 200, s == http.StatusNoContent, s == http.StatusPartialContent, s == http.StatusNotModified:
		return false
	}
	h := cw.w.Header()
	if h.Get("Content-Encoding") != "" || h.Get("Content-Range") != "" {
		return false
	}
	for _, v := range h.Values("Cache-Control") {
		if containsToken(v, "no-transform") {
			return false
		}
	}
	ct, set := h["Content-Type"]
	if !set && len(cw.buf)+len(next) > 0 {
		// What net/http would send: sniff it now so that the decision sees it.
		sniff := cw.buf
		if n := min(len(next), 512-len(sniff)); n > 0 {
			sniff = append(sniff[:len(sniff):len(sniff)], next[:n]...)
		}
		ct = []string{http.DetectContentType(sniff)}
		h["Content-Type"] = ct
	}
	return len(ct) > 0 && Compressible(ct[0])
}

// decide writes the held-back status, with the headers of a compressed response if it is one,
// and the held-back body. flushing says the handler flushed before the end; next is a write
// about to follow.
func (cw *writer) decide(flushing bool, next []byte) {
	cw.decided = true
	h := cw.w.Header()
	// The size first: it is the cheaper test, and most answers are decided by it.
	if cw.bigEnough(flushing, len(next)) && cw.eligible(next) {
		AddVary(h, "Accept-Encoding")
		if cw.coding != "" {
			h.Del("Content-Length")
			h.Del("Accept-Ranges")
			h.Set("Content-Encoding", cw.coding)
			if et := h.Get("ETag"); strings.HasPrefix(et, `"`) {
				h.Set("ETag", "W/"+et)
			}
			cw.enc = getEncoder(cw.coding, cw.w)
		}
	}
	cw.w.WriteHeader(cw.status)
	if len(cw.buf) > 0 {
		if cw.enc != nil {
			_, _ = cw.enc.Write(cw.buf)
		} else {
			_, _ = cw.w.Write(cw.buf)
		}
		cw.buf = cw.buf[:0]
	}
}

// bigEnough reports whether the body reaches MinSize, by its Content-Length or the bytes held
// back and pending; a stream flushed early without a Content-Length counts as big enough.
func (cw *writer) bigEnough(flushing bool, pending int) bool {
	if cl := cw.w.Header().Get("Content-Length"); cl != "" {
		n, err := strconv.ParseInt(cl, 10, 64)
		return err == nil && n >= MinSize
	}
	return flushing || len(cw.buf)+pending >= MinSize
}

// Compressible reports whether a media type (a Content-Type value, parameters allowed) is worth
// compressing: text, and the structured formats that are text or that compress well. Images
// other than SVG, BMP and icons, audio, video, WOFF fonts and archives are not: they are
// compressed already.
func Compressible(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	if strings.HasPrefix(mt, "text/") {
		return true
	}
	if strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml") {
		return true
	}
	switch mt {
	case "application/json", "application/javascript", "application/x-javascript",
		"application/ecmascript", "application/xml", "application/wasm", "application/x-ndjson",
		"application/yaml", "application/x-yaml", "application/toml", "application/graphql",
		"application/x-www-form-urlencoded", "application/vnd.ms-fontobject",
		"image/svg+xml", "image/x-icon", "image/vnd.microsoft.icon", "image/bmp",
		"font/ttf", "font/otf", "application/x-font-ttf", "application/x-font-otf":
		return true
	}
	return false
}

// containsToken reports whether a comma-separated header value lists token (case-insensitive);
// a token may carry a value (no-transform never does, but max-age=0 would).
func containsToken(v, token string) bool {
	for v != "" {
		var t string
		t, v, _ = strings.Cut(v, ",")
		t, _, _ = strings.Cut(t, "=")
		if strings.EqualFold(strings.TrimSpace(t), token) {
			return true
		}
	}
	return false
}

// AddVary adds token to h's Vary header, merged into the last Vary line already there
// ("Vary: Cookie" becomes "Vary: Cookie, Accept-Encoding") so that the answer carries one
// Vary line, as an application that set its own expects; nothing changes when a Vary line
// lists the token already or is "*".
func AddVary(h http.Header, token string) {
	vs := h["Vary"]
	if containsTokenValues(vs, token) {
		return
	}
	for i := len(vs) - 1; i >= 0; i-- {
		if v := strings.TrimRight(strings.TrimSpace(vs[i]), ", "); v != "" {
			vs[i] = v + ", " + token
			return
		}
	}
	h["Vary"] = []string{token}
}

func containsTokenValues(vs []string, token string) bool {
	for _, v := range vs {
		if containsToken(v, token) || strings.TrimSpace(v) == "*" {
			return true
		}
	}
	return false
}
