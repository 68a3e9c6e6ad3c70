package http1

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// response is the http.ResponseWriter of one request. The answer's first bytes wait in the
// connection's pending buffer until the head is written: an answer that ends within them gets
// a Content-Length, a longer or flushed one is chunked (HTTP/1.1) or ends with the connection
// (HTTP/1.0), as under net/http.
type response struct {
	c      *conn
	req    *http.Request
	body   *body
	header http.Header

	status        int
	wroteHeader   bool  // the final status is set
	committed     bool  // the head is in the connection's write buffer
	chunked       bool  // the body goes out in chunks
	contentLength int64 // declared or computed; -1 when unknown
	written       int64 // body bytes after the head
	closeAfter    bool  // the connection ends with this answer
	handlerDone   bool
	writeDeadline bool // the handler set one: cleared after the answer
	err           error
}

// pendingSize is how much of an answer waits for its end before the head is written, so that
// a short answer carries a Content-Length (net/http's bufferBeforeChunkingSize).
const pendingSize = 2 << 10

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
	_ io.ReaderFrom       = (*response)(nil)
)

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader || w.handlerDone {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.setStatus(code)
}

// setStatus sets the final status, and takes the Content-Length the handler set: once, and
// only when every copy of it says the same (a proxy in front could pick either of two).
func (w *response) setStatus(code int) {
	w.status, w.wroteHeader = code, true
	cls := w.header["Content-Length"]
	if len(cls) == 0 {
		return
	}
	n, err := strconv.ParseInt(cls[0], 10, 64)
	if err != nil || n < 0 || slices.ContainsFunc(cls[1:], func(v string) bool { return v != cls[0] }) {
		delete(w.header, "Content-Length") // as net/http: a length it cannot vouch for is dropped
		return
	}
	w.contentLength = n
	w.header["Content-Length"] = cls[:1]
}

// writeInformational sends a 1xx answer (103 Early Hints) at once, with the headers set so far.
func (w *response) writeInformational(code int) {
	if w.committed || w.err != nil || w.req.ProtoMinor == 0 {
		return // an HTTP/1.0 client knows no 1xx (RFC 9110 15.2)
	}
	w.c.contMu.Lock() // a 100 Continue may be being written by the body's reader
	defer w.c.contMu.Unlock()
	bw := w.c.bw
	w.statusLine(code)
	writeHeaders(bw, w.header, nil, true)
	_, _ = bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		w.err = err
	}
}

func (w *response) statusLine(code int) {
	bw := w.c.bw
	if w.req.ProtoMinor == 0 {
		_, _ = bw.WriteString("HTTP/1.0 ")
	} else {
		_, _ = bw.WriteString("HTTP/1.1 ")
	}
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	var num [3]byte
	_, _ = bw.Write(strconv.AppendInt(num[:0], int64(code), 10))
	_ = bw.WriteByte(' ')
	_, _ = bw.WriteString(text)
	_, _ = bw.WriteString("\r\n")
}

// bodyAllowed reports whether the status may carry a body (RFC 9110 6.4.1).
func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.handlerDone {
		return 0, http.ErrHandlerTimeout
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if left := w.contentLength - w.written - int64(len(w.c.pending)); w.contentLength >= 0 && int64(len(p)) > left {
		// What fits goes out, so that the answer ends where its length says it does.
		n := 0
		if left > 0 {
			n, _ = w.Write(p[:left])
		}
		return n, http.ErrContentLength
	}
	if !w.committed {
		if len(w.c.pending)+len(p) <= pendingSize {
			w.c.pending = append(w.c.pending, p...)
			return len(p), nil
		}
		if err := w.commit(false, p); err != nil {
			return 0, err
		}
	}
	return w.send(p)
}

func (w *response) WriteString(s string) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed && w.wroteHeader && w.err == nil && !w.handlerDone && w.contentLength < 0 &&
		bodyAllowed(w.status) && len(w.c.pending)+len(s) <= pendingSize {
		w.c.pending = append(w.c.pending, s...)
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// send writes body bytes after the head, framed.
func (w *response) send(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	w.written += int64(len(p))
	if w.req.Method == http.MethodHead {
		return len(p), nil
	}
	bw := w.c.bw
	if !w.chunked && len(p) > bw.Available() && bw.Buffered() > 0 {
		// What is buffered (the head, mostly) and p leave in one sendmsg, where bufio would
		// fill its buffer, write it, and then write the rest.
		out := &w.c.out
		out.tail = p
		err := bw.Flush()
		out.tail = nil
		if err != nil {
			w.err = err
			return 0, err
		}
		return len(p), nil
	}
	if w.chunked {
		var size [16]byte
		_, _ = bw.Write(strconv.AppendInt(size[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
	}
	n, err := bw.Write(p)
	if err == nil && w.chunked {
		_, err = bw.WriteString("\r\n")
	}
	if err != nil {
		w.err = err
		return n, err
	}
	return n, nil
}

// commit writes the head into the connection's buffer, then the pending bytes. final says the
// handler has returned: the pending bytes are then the whole body. next is what the handler
// writes now, which the type is sniffed from when nothing is pending.
func (w *response) commit(final bool, next []byte) error {
	if w.committed {
		return w.err
	}
	w.committed = true
	h := w.header
	code := w.status
	pending := w.c.pending
	isHEAD := w.req.Method == http.MethodHead
	var extra [5]field // headers this writer adds
	n := 0

	if b := w.body; b != nil && !b.eof.Load() {
		// A body left unread: the connection carries another request only once the body is
		// read to its end, which the answer must know before it says keep-alive.
		switch {
		case b.failed.Load():
			w.closeAfter = true
		case b.answer():
			w.closeAfter = true // the client has not sent the body and never will
		case final:
			// The handler is done with the body: read what is left of it now (at most
			// maxDrain, under BodyTimeout), as net/http does before a refusal's head.
			w.closeAfter = w.closeAfter || !b.drain()
		case b.chunked || b.remain.Load() > maxDrain:
			w.closeAfter = true // the handler may still read it: no draining behind its back
		}
	}
	if b := w.body; b != nil {
		b.answer() // from now no 100 Continue: it would land within this answer
	}
	if hasToken(h["Connection"], "close") {
		w.closeAfter = true
	}
	te := h.Get("Transfer-Encoding")
	switch {
	case code == http.StatusNotModified:
		delete(h, "Content-Type")
		delete(h, "Content-Length")
		delete(h, "Transfer-Encoding")
		w.contentLength = -1
	case !bodyAllowed(code):
		delete(h, "Content-Length")
		delete(h, "Transfer-Encoding")
		w.contentLength = -1
	case w.contentLength >= 0 && te != "":
		// The declared length frames the answer: a Transfer-Encoding beside it would make a
		// proxy in front read the body as chunks (RFC 9112 6.3), as net/http drops it.
		delete(h, "Transfer-Encoding")
		te = ""
	case final && w.contentLength < 0 && te == "" && (!isHEAD || len(pending) > 0):
		w.contentLength = int64(len(pending))
		extra[n] = field{"Content-Length", strconv.Itoa(len(pending))}
		n++
	}
	sniff := pending
	if len(sniff) == 0 {
		sniff = next
	}
	if _, ok := h["Content-Type"]; !ok && bodyAllowed(code) && len(sniff) > 0 && te == "" && h.Get("Content-Encoding") == "" {
		extra[n] = field{"Content-Type", http.DetectContentType(sniff)}
		n++
	}
	if _, ok := h["Date"]; !ok {
		extra[n] = field{"Date", httpDate()}
		n++
	}
	if bodyAllowed(code) && !isHEAD && w.contentLength < 0 {
		switch {
		case w.req.ProtoMinor == 0 || te == "identity":
			w.closeAfter = true // the end of the body is the end of the connection
			delete(h, "Transfer-Encoding")
		default:
			w.chunked = true
			delete(h, "Transfer-Encoding")
			extra[n] = field{"Transfer-Encoding", "chunked"}
			n++
		}
	}
	if w.c.s.closing.Load() {
		w.closeAfter = true
	}
	switch {
	case w.closeAfter && !hasToken(h["Connection"], "close"):
		delete(h, "Connection")
		extra[n] = field{"Connection", "close"}
		n++
	case !w.closeAfter && w.req.ProtoMinor == 0:
		extra[n] = field{"Connection", "keep-alive"}
		n++
	}

	bw := w.c.bw
	w.statusLine(code)
	writeHeaders(bw, h, extra[:n], false)
	if _, err := bw.WriteString("\r\n"); err != nil {
		w.err = err
		return err
	}
	w.c.pending = w.c.pending[:0]
	if len(pending) > 0 && bodyAllowed(code) {
		if _, err := w.send(pending); err != nil {
			return err
		}
	}
	return nil
}

// field is a header line this writer adds.
type field struct{ name, value string }

// headerKeys is the scratch list that writeHeaders sorts.
var headerKeys = sync.Pool{New: func() any { s := make([]string, 0, 16); return &s }}

// writeHeaders writes h in key order (as net/http does), then extra. Names that are not tokens
// are left out and a line break in a value becomes a space, so that no header can add a line
// of its own. informational leaves out what describes a body.
func writeHeaders(bw interface{ WriteString(string) (int, error) }, h http.Header, extra []field, informational bool) {
	kp := headerKeys.Get().(*[]string)
	keys := (*kp)[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !isToken(k) || informational && (k == "Content-Length" || k == "Transfer-Encoding") {
			continue
		}
		for _, v := range h[k] {
			_, _ = bw.WriteString(k)
			_, _ = bw.WriteString(": ")
			_, _ = bw.WriteString(cleanValue(v))
			_, _ = bw.WriteString("\r\n")
		}
	}
	*kp = keys[:0]
	headerKeys.Put(kp)
	for _, e := range extra {
		_, _ = bw.WriteString(e.name)
		_, _ = bw.WriteString(": ")
		_, _ = bw.WriteString(e.value)
		_, _ = bw.WriteString("\r\n")
	}
}

// cleanValue trims a header value and turns its line breaks into spaces.
func cleanValue(v string) string {
	v = strings.TrimSpace(v)
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(v)
	}
	return v
}

// Flush sends the head and what the handler wrote so far.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController, with the error.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if err := w.commit(false, nil); err != nil {
		return err
	}
	if err := w.c.bw.Flush(); err != nil {
		w.err = err
		return err
	}
	return nil
}

// ReadFrom sends src as the body: by sendfile when the length is declared and the socket can.
func (w *response) ReadFrom(src io.Reader) (int64, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed && w.contentLength < 0 {
		return io.Copy(writerOnly{w}, src) // short bodies still get a Content-Length
	}
	if err := w.commit(false, nil); err != nil {
		return 0, err
	}
	rf, ok := w.c.rwc.(io.ReaderFrom)
	if w.chunked || w.req.Method == http.MethodHead || !bodyAllowed(w.status) || !ok {
		return io.Copy(writerOnly{w}, src)
	}
	if file, off, n, advance, ok := fileSection(src, w.contentLength-w.written); ok && n > 0 && w.contentLength >= 0 {
		if raw := w.c.out.socket(); raw != nil {
			sent, err := w.sendFile(raw, file, off, n) // sendfile.go
			advance(sent)
			return sent, err
		}
	}
	// The head waits in the socket (TCP_CORK) for the file, as nginx's tcp_nopush holds it:
	// both leave in full segments, sent by this call rather than by the client's reads.
	if raw := w.c.out.socket(); raw != nil && setCork(raw, 1) == nil {
		defer setCork(raw, 0)
	}
	if err := w.c.bw.Flush(); err != nil {
		w.err = err
		return 0, err
	}
	// Never more than the declared length. The socket sends a file by sendfile only when it
	// sees the *os.File under at most one *io.LimitedReader (io.CopyN's), so one that bounds
	// it well enough already is not wrapped again.
	if left := w.contentLength - w.written; w.contentLength >= 0 {
		if lr, ok := src.(*io.LimitedReader); !ok || lr.N > left {
			src = io.LimitReader(src, left)
		}
	}
	// In pieces, so that each has WriteTimeout (a file may take longer than it in all). The
	// socket sends by sendfile what is an *os.File under one *io.LimitedReader only.
	var sent int64
	for {
		w.c.armWrite()
		piece, outer := src, (*io.LimitedReader)(nil)
		if w.c.s.WriteTimeout > 0 {
			if lr, ok := src.(*io.LimitedReader); ok {
				outer, piece = lr, &io.LimitedReader{R: lr.R, N: min(lr.N, readFromPiece)}
			} else {
				piece = &io.LimitedReader{R: src, N: readFromPiece}
			}
		}
		n, err := rf.ReadFrom(piece)
		if outer != nil {
			outer.N -= n
		}
		sent += n
		w.written += n
		if err != nil {
			w.err = err
			return sent, err
		}
		if piece == src || n < readFromPiece {
			return sent, nil
		}
	}
}

// readFromPiece is how much of a reader that is no file goes out under one write deadline
// by the socket's ReadFrom: small, so that a slow steady reader is not cut off (files go out
// by sendFile, whose every wait has a deadline of its own).
const readFromPiece = 256 << 10

type writerOnly struct{ io.Writer }

// socketOf returns c's TCP socket, or nil when c is not a TCP connection (TLS, a pipe).
func socketOf(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if _, tcp := c.LocalAddr().(*net.TCPAddr); !ok || !tcp {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

func setCork(raw syscall.RawConn, v int) error {
	var err error
	if cerr := raw.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, v)
	}); cerr != nil {
		return cerr
	}
	return err
}

// SetReadDeadline is for http.ResponseController: it bounds the reads of the request body.
func (w *response) SetReadDeadline(t time.Time) error { return w.c.rwc.SetReadDeadline(t) }

// SetWriteDeadline is for http.ResponseController: it bounds the writes of this answer.
func (w *response) SetWriteDeadline(t time.Time) error {
	w.writeDeadline = true
	return w.c.rwc.SetWriteDeadline(t)
}

// EnableFullDuplex is for http.ResponseController: the body stays readable while the answer
// is written, always.
func (w *response) EnableFullDuplex() error { return nil }

// finish ends the answer after the handler returned: the head if not sent, the last chunk, and
// the flush. An error means the connection cannot go on.
func (w *response) finish() error {
	if !w.wroteHeader {
		w.setStatus(http.StatusOK) // a handler that wrote nothing (WriteHeader is closed now)
	}
	if err := w.commit(true, nil); err != nil {
		return err
	}
	if w.chunked {
		_, _ = w.c.bw.WriteString("0\r\n\r\n")
	}
	if w.contentLength >= 0 && w.written < w.contentLength && bodyAllowed(w.status) && w.req.Method != http.MethodHead {
		w.closeAfter = true // shorter than it said: the client would wait for the rest
	}
	err := w.c.bw.Flush()
	if w.writeDeadline {
		_ = w.c.rwc.SetWriteDeadline(time.Time{})
		w.c.writeArmed = time.Time{} // WriteTimeout's deadline is set again at the next write
	}
	if err != nil {
		return err
	}
	return w.err
}

// httpDate returns the Date header's value, formatted once a second.
func httpDate() string {
	now := time.Now()
	sec := now.Unix()
	if d := cachedDate.Load(); d != nil && d.sec == sec {
		return d.text
	}
	d := &dateText{sec: sec, text: now.UTC().Format(http.TimeFormat)}
	cachedDate.Store(d)
	return d.text
}

type dateText struct {
	sec  int64
	text string
}

var cachedDate atomic.Pointer[dateText]
