package httpserver

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/peregrinephp/peregrine/internal/docroot"
	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// memoryAnswer is how much of an answer's body is held in memory, in a pooled buffer; the rest
// waits in a temporary file, so a slow client holds neither a worker nor much memory (nginx's
// fastcgi_buffering).
const memoryAnswer = maxPooledBuffer

// connAnswerMemory is how much answer memory the requests of one connection may hold together.
// An HTTP/1.1 connection runs one request at a time and never reaches it; an HTTP/2 client that
// opens 128 streams and reads nothing would otherwise hold 128 x memoryAnswer (32 MiB) per
// connection: past it, answers wait in their temporary files from their first byte.
const connAnswerMemory = 1 << 20

// errTooManySpills keeps an answer that fits in memory there when temporary files already hold
// Handler.maxSpills answers: each is a descriptor, and HTTP/2 clients that read nothing could
// otherwise take every descriptor the process has (128 per connection), workers' pipes included.
var errTooManySpills = errors.New("too many answers wait in temporary files")

// spillCopy is the buffer a spilled answer is copied to the client with; an answer blocked on a
// client that reads nothing holds one.
const spillCopy = 16 << 10

// answer receives one request's answer from its worker (it is a worker.Answer). Until PHP asks
// for a flush it collects the answer, and the handler writes it once the worker is free; from
// the first flush on it writes each part to the client as it arrives. Its frames may arrive on
// another request's goroutine (a batch), but never while the handler's goroutine uses it.
//
//	HINTS* --> RESPONSE ---------------> collecting --(end)--> finish: headers and body,
//	             |                        |                            or the X-Sendfile file
//	             | FLUSH (no X-Sendfile)  | FLUSH
//	             v                        v
//	          streaming: each part written and flushed at once --(end)--> done
//	             |
//	             | the client is gone and PHP sends more: Frame fails, the worker is replaced
//
// An answer that names a file with X-Sendfile or X-Accel-Redirect is never streamed: its body is
// dropped and finish sends the file (sendFile).
type answer struct {
	w    *countingWriter
	r    *http.Request
	h    *Handler
	bufs *sync.Pool

	status  int
	headers []protocol.Field
	body    *[]byte  // pooled, up to memoryAnswer
	spill   *os.File // the rest, in an unlinked temporary file
	size    int64
	conn    *localAddr // the connection, whose answer memory body counts against; nil: none
	held    int64      // bytes of body counted against conn

	sendfile protocol.Field // X-Sendfile or X-Accel-Redirect, when PHP named a file to send

	streaming bool  // headers sent; parts go to the client as they come
	clientErr error // the client is gone; the rest is read and dropped
	refused   error // the answer broke a limit: the client gets 502, the rest is dropped
}

// errClientGone ends a streamed answer whose client left while PHP still has more to send: the
// worker is replaced rather than left producing for nobody (an endless server-sent events loop
// would hold it for good), as PHP-FPM aborts a script at its next output once the client is gone.
var errClientGone = fmt.Errorf("%w: the client left during a streamed answer and PHP was still sending", worker.ErrAbandoned)

var _ worker.Answer = (*answer)(nil)

// Frame implements worker.Answer.
func (a *answer) Frame(t protocol.Type, flags uint16, payload []byte) error {
	if a.refused != nil {
		return nil
	}
	switch t {
	case protocol.TypeHints:
		fields, err := protocol.DecodeFields(payload)
		if errors.Is(err, protocol.ErrTooLarge) {
			return nil // hints are advice: too many are dropped
		}
		if err != nil {
			return err
		}
		a.earlyHints(fields)
		return nil
	case protocol.TypeResponse:
		resp, err := protocol.DecodeResponse(payload)
		if errors.Is(err, protocol.ErrTooLarge) {
			// A well-formed answer over a limit: refused, but the worker is sound.
			a.refused = err
			return nil
		}
		if err != nil {
			return err
		}
		a.status, a.headers = resp.Status, resp.Headers
		a.sendfile = sendfileHeader(resp.Headers)
		payload = resp.Body
	}
	if a.streaming {
		if flags&protocol.FlagMore != 0 && (a.clientErr != nil || a.r.Context().Err() != nil) {
			return errClientGone
		}
		a.send(payload, true)
		return nil
	}
	if a.sendfile.Name != "" {
		return nil // the file is the body
	}
	if err := a.collect(payload); err != nil {
		return err
	}
	if flags&protocol.FlagFlush != 0 && a.status >= 200 {
		a.startStream(flags&protocol.FlagMore == 0)
	}
	return nil
}

// earlyHints sends a 103 to clients that can take it (never HTTP/1.0), before the answer.
func (a *answer) earlyHints(fields []protocol.Field) {
	if a.streaming || a.clientErr != nil || !a.r.ProtoAtLeast(1, 1) || len(fields) == 0 {
		return
	}
	hdr := a.w.Header()
	keys := make([]string, 0, len(fields))
	for _, f := range fields {
		key := http.CanonicalHeaderKey(f.Name)
		if _, seen := hdr[key]; !seen {
			keys = append(keys, key)
		}
		hdr[key] = append(hdr[key], f.Value)
	}
	a.w.WriteHeader(http.StatusEarlyHints)
	for _, k := range keys {
		delete(hdr, k) // the hints are not part of the final answer
	}
}

// collect appends part of the body to memory, then to the spill file.
func (a *answer) collect(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if a.body == nil {
		a.body = a.bufs.Get().(*[]byte)
	}
	fits := a.spill == nil && len(*a.body)+len(p) <= memoryAnswer
	if fits && a.reserve(len(p)) {
		*a.body = append(*a.body, p...)
		a.size += int64(len(p))
		return nil
	}
	if a.spill == nil {
		var f *os.File
		var err error
		if fits && a.h.spills.Load() >= a.h.maxSpills {
			err = errTooManySpills
		} else {
			f, err = a.h.tempFile()
		}
		switch {
		case err != nil && fits:
			// Over the connection's share, but no file to wait in (out of descriptors):
			// memory it is, as before the share existed.
			a.conn.answerMem.Add(int64(len(p)))
			a.held += int64(len(p))
			*a.body = append(*a.body, p...)
			a.size += int64(len(p))
			return nil
		case err != nil:
			return fmt.Errorf("cannot hold a large answer: %w", err)
		}
		a.spill = f
		a.h.spills.Add(1)
	}
	if _, err := a.spill.Write(p); err != nil {
		return fmt.Errorf("cannot hold a large answer: %w", err)
	}
	a.size += int64(len(p))
	return nil
}

// reserve counts n more bytes of body against the connection's answer memory, and reports
// false, counting nothing, when that would pass connAnswerMemory.
func (a *answer) reserve(n int) bool {
	if a.conn == nil {
		return true
	}
	if a.conn.answerMem.Add(int64(n)) > connAnswerMemory {
		a.conn.answerMem.Add(-int64(n))
		return false
	}
	a.held += int64(n)
	return true
}

// writeHeader sends the status and headers; whole says the body is complete, so its length is
// known. The length is the server's to say, as nginx says it after PHP-FPM: the body's when it
// is whole; when it is streamed, the script's own Content-Length, if it set one (http1 then
// sends no more than it, and ends the connection after a body that falls short); for HEAD,
// the GET's length the script declared, or the body it wrote anyway, or none (RFC 9110 9.3.2).
func (a *answer) writeHeader(whole bool) {
	hdr := a.w.Header()
	length := phpHeaders(hdr, a.headers)
	switch {
	case a.r.Method == http.MethodHead && length == "" && a.size == 0:
	case a.r.Method == http.MethodHead && length != "", !whole && length != "":
		hdr["Content-Length"] = []string{length}
	case whole, a.r.Method == http.MethodHead:
		hdr["Content-Length"] = []string{strconv.FormatInt(a.size, 10)}
	}
	a.w.WriteHeader(a.status)
}

// phpHeaders adds the headers of PHP's answer to hdr but for those the server decides: the
// body's framing, the connection's (Connection, Keep-Alive: nginx drops them too), X-Sendfile
// and X-Accel-*. It returns the script's Content-Length, if it set one.
func phpHeaders(hdr http.Header, fields []protocol.Field) (length string) {
	for _, f := range fields {
		switch key := http.CanonicalHeaderKey(f.Name); {
		case key == "Content-Length":
			length = f.Value
		case key == "Transfer-Encoding", key == "Connection", key == "Keep-Alive", key == "X-Sendfile", isAccelHeader(key):
		default:
			hdr[key] = append(hdr[key], f.Value)
		}
	}
	return length
}

// startStream sends the headers and what was collected, and from now on every part at once.
func (a *answer) startStream(whole bool) {
	a.streaming = true
	a.writeHeader(whole)
	a.writeCollected()
	a.flush()
}

// smallWrite is a write that net/http buffers and the socket's buffer then takes whole: it needs
// no deadline of its own (a hello world's answer is one).
const smallWrite = 4 << 10

// send writes one part to the client, with a deadline per write.
func (a *answer) send(p []byte, flush bool) {
	if a.clientErr != nil || len(p) == 0 && !flush {
		return
	}
	if len(p) > 0 {
		if len(p) > smallWrite || flush {
			a.deadline()
		}
		if _, err := a.w.Write(p); err != nil {
			if errors.Is(err, http.ErrBodyNotAllowed) || errors.Is(err, http.ErrContentLength) {
				// A 204 or 304 has no body, a body past the script's Content-Length is not
				// sent: dropped, the client is fine.
				return
			}
			a.clientErr = err
			return
		}
	}
	if flush {
		a.flush()
	}
}

func (a *answer) flush() {
	if a.clientErr != nil {
		return
	}
	a.deadline()
	if err := http.NewResponseController(a.w).Flush(); err != nil {
		a.clientErr = err
	}
}

func (a *answer) deadline() {
	if a.h.opts.WriteTimeout > 0 {
		_ = http.NewResponseController(a.w).SetWriteDeadline(time.Now().Add(a.h.opts.WriteTimeout))
	}
}

// writeCollected writes the collected body: memory first, then the spill file.
func (a *answer) writeCollected() {
	if a.body != nil {
		a.send(*a.body, false)
		*a.body = (*a.body)[:0]
		if a.held > 0 { // sent: the connection may use it again
			a.conn.answerMem.Add(-a.held)
			a.held = 0
		}
	}
	if a.spill == nil || a.clientErr != nil {
		return
	}
	if _, err := a.spill.Seek(0, io.SeekStart); err != nil {
		a.clientErr = err
		return
	}
	buf := make([]byte, spillCopy)
	for a.clientErr == nil {
		n, err := a.spill.Read(buf)
		a.send(buf[:n], false)
		if err != nil {
			break
		}
	}
	_ = a.spill.Truncate(0)
	_, _ = a.spill.Seek(0, io.SeekStart)
}

// finish writes a collected answer once the worker is free.
func (a *answer) finish() {
	if a.streaming {
		return
	}
	if a.refused != nil {
		a.h.log.Error("worker's answer refused", "path", a.r.URL.Path, "err", a.refused)
		httpError(a.w, http.StatusBadGateway, "the PHP application's answer is larger than the server accepts; see the server log")
		return
	}
	if a.status < 200 {
		a.h.log.Error("worker answered with an informational status as its final answer", "status", a.status, "path", a.r.URL.Path)
		httpError(a.w, http.StatusBadGateway, "the PHP application answered with a 1xx status, which cannot end a response")
		return
	}
	if a.sendfile.Name != "" {
		a.sendFile()
		return
	}
	a.writeHeader(true)
	if a.r.Method != http.MethodHead {
		a.writeCollected()
	}
}

// release returns the memory and closes the spill file, which is unlinked already.
func (a *answer) release() {
	if a.held > 0 {
		a.conn.answerMem.Add(-a.held)
		a.held = 0
	}
	if a.body != nil {
		worker.Poison(*a.body)
		if cap(*a.body) <= maxPooledBuffer {
			*a.body = (*a.body)[:0]
			a.bufs.Put(a.body)
		}
		a.body = nil
	}
	if a.spill != nil {
		_ = a.spill.Close()
		a.h.spills.Add(-1)
		a.spill = nil
	}
}

// sendfileHeader returns the X-Sendfile or X-Accel-Redirect field of an answer, the first one if
// there are several; a zero Field when there is none. It runs for every answer, so it compares
// lengths before names.
func sendfileHeader(fields []protocol.Field) protocol.Field {
	for _, f := range fields {
		switch len(f.Name) {
		case len("X-Sendfile"):
			if strings.EqualFold(f.Name, "X-Sendfile") {
				return protocol.Field{Name: "X-Sendfile", Value: f.Value}
			}
		case len("X-Accel-Redirect"):
			if strings.EqualFold(f.Name, "X-Accel-Redirect") {
				return protocol.Field{Name: "X-Accel-Redirect", Value: f.Value}
			}
		}
	}
	return protocol.Field{}
}

// sendFile answers with the file PHP named in X-Sendfile or X-Accel-Redirect, as nginx answers
// an X-Accel-Redirect: the file with its validators, ranges and conditional requests
// (docroot.ServeFile), whatever the request's method, with the status the file gives (200, 206,
// 304, 404 ...) rather than PHP's, and PHP's other headers (Content-Type, Content-Disposition,
// Cache-Control, Set-Cookie) kept. Only files under http.root or http.sendfile_dirs are sent: a
// file elsewhere is the application's mistake, logged and answered with 500. An X-Accel-Redirect
// path meets the document root's rules (docroot.Root.ResolveFile): a dot segment answers 403,
// a script or PHP source 404, as static requests do. An X-Sendfile file's precompressed sibling
// must pass the file's own check.
func (a *answer) sendFile() {
	root := a.h.opts.Root // nil: no root, and ServeFile looks for no precompressed sibling
	rootDir := ""
	if root != nil {
		rootDir = root.Dir()
	}
	file, err := sendfilePath(rootDir, a.h.opts.SendfileDirs, a.sendfile)
	if err != nil {
		a.h.log.Error("PHP named a file the server does not send", "header", a.sendfile.Name, "file", a.sendfile.Value, "path", a.r.URL.Path, "err", err)
		httpError(a.w, http.StatusInternalServerError, "the PHP application named a file the server may not send ("+a.sendfile.Name+"); see the server log")
		return
	}
	var allowSibling func(string) bool
	if a.sendfile.Name == "X-Accel-Redirect" {
		// The document root's rules, as nginx's internal redirect meets its locations.
		uri, _ := accelPath(a.sendfile.Value) // valid: sendfilePath took it
		if t := root.ResolveFile(uri); t.Kind != docroot.Static {
			a.h.log.Warn("X-Accel-Redirect names a path the document root refuses", "uri", a.sendfile.Value, "answer", t.Kind.String(), "path", a.r.URL.Path)
			root.Serve(a.w, a.r, t)
			return
		}
	} else {
		// A precompressed sibling (doc.txt.gz) is sent in place of the file only if it passes
		// the same check: it may be a link out of the allowed directories.
		allowSibling = func(p string) bool {
			_, err := sendfilePath(rootDir, a.h.opts.SendfileDirs, protocol.Field{Name: "X-Sendfile", Value: p})
			return err == nil
		}
	}
	phpHeaders(a.w.Header(), a.headers) // the file's length is the file's
	root.ServeFile(a.w, a.r, file, allowSibling)
}

// accelPath returns the decoded path of an X-Accel-Redirect URI, its query string dropped.
func accelPath(v string) (string, error) {
	uri, _, _ := strings.Cut(v, "?")
	return url.PathUnescape(uri)
}

// isAccelHeader reports whether the canonical header name key is one of nginx's X-Accel-*
// headers (X-Accel-Redirect, -Buffering, -Expires, -Limit-Rate, -Charset): instructions from PHP
// to the server that nginx acts on or ignores, and never passes to the client.
func isAccelHeader(key string) bool {
	return len(key) > len("X-Accel-") && key[:len("X-Accel-")] == "X-Accel-"
}

// errSendfileDenied is why sendfilePath refuses a file.
var errSendfileDenied = errors.New("not allowed")

// sendfilePath returns the file system path of the file h names, which must lie under root, the
// document root ("" when there is none), or one of dirs (http.sendfile_dirs):
//   - X-Accel-Redirect carries a URI (/downloads/report.pdf, percent-encoded, a query string
//     ignored) that names the file at that path under the root, as nginx maps it to its root;
//     a ".." segment or a NUL byte is refused, and symbolic links under the root are followed
//     wherever they lead, as for static files;
//   - X-Sendfile carries an absolute file system path, which must still be under the root or
//     one of dirs once its symbolic links are resolved (a path that does not exist only needs
//     to be under one as written: it answers 404).
func sendfilePath(root string, dirs []string, h protocol.Field) (string, error) {
	if h.Name == "X-Accel-Redirect" {
		p, err := accelPath(h.Value)
		switch {
		case root == "":
			return "", fmt.Errorf("%w: X-Accel-Redirect names a URI under http.root, which is not set (X-Sendfile takes a path under http.sendfile_dirs)", errSendfileDenied)
		case err != nil:
			return "", fmt.Errorf("%w: %q is not a valid URI: %v", errSendfileDenied, h.Value, err)
		case !strings.HasPrefix(p, "/"):
			return "", fmt.Errorf("%w: %q is not a path starting with / (named locations are not supported)", errSendfileDenied, h.Value)
		case strings.Contains(p, "\x00"), dotDot(p):
			return "", fmt.Errorf("%w: %q contains a NUL byte or a .. segment", errSendfileDenied, h.Value)
		}
		return filepath.Join(root, filepath.FromSlash(path.Clean(p))), nil
	}
	p := h.Value
	switch {
	case !filepath.IsAbs(p):
		return "", fmt.Errorf("%w: %q is not an absolute path", errSendfileDenied, p)
	case strings.Contains(p, "\x00"):
		return "", fmt.Errorf("%w: %q contains a NUL byte", errSendfileDenied, p)
	}
	p = filepath.Clean(p)
	allowed := dirs
	if root != "" {
		allowed = append([]string{root}, dirs...)
	}
	// Each allowed directory as configured and with its own links resolved.
	var realDirs []string
	for _, dir := range allowed {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			realDirs = append(realDirs, real)
		}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		// Nothing to resolve: the path as written decides, and the file's absence answers 404.
		if !underAny(p, allowed) && !underAny(p, realDirs) {
			return "", fmt.Errorf("%w: %s is not under http.root or http.sendfile_dirs (%s)", errSendfileDenied, p, strings.Join(allowed, ", "))
		}
		return p, nil
	}
	if !underAny(real, realDirs) {
		if real != p {
			return "", fmt.Errorf("%w: %s (%s once its links are resolved) is not under http.root or http.sendfile_dirs (%s)", errSendfileDenied, h.Value, real, strings.Join(allowed, ", "))
		}
		return "", fmt.Errorf("%w: %s is not under http.root or http.sendfile_dirs (%s)", errSendfileDenied, p, strings.Join(allowed, ", "))
	}
	return real, nil
}

// underAny reports whether the clean path p is one of dirs or lies below one.
func underAny(p string, dirs []string) bool {
	for _, dir := range dirs {
		if under(p, dir) {
			return true
		}
	}
	return false
}

// under reports whether the clean path p is dir or lies below it.
func under(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir) && p[len(dir)] == '/'
}

// dotDot reports whether the slash-separated path p has a ".." segment.
func dotDot(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}
