// Package httpserver owns the HTTP side of Peregrine: it turns each http.Request into a REQUEST
// frame (reading its body, into a temporary file when it is large, and under the cli runtime
// parsing multipart uploads into temporary files), has the pool run it, and writes the worker's
// answer back, collected or streamed (answer.go); pool and worker failures become 5xx status
// codes in one place (Handler.fail). It does not start or supervise processes.
package httpserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/peregrinephp/peregrine/internal/docroot"
	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// Runner runs requests on PHP workers; *pool.Pool is one.
type Runner interface {
	// Admit reports whether a request would be let in now, so that its body is not read for
	// nothing; nil or a *pool.Error.
	Admit() error
	// Do runs call and returns the pid of the worker that answered; see pool.Pool.Do.
	Do(ctx context.Context, call *worker.Call) (pid int, err error)
}

var _ Runner = (*pool.Pool)(nil)

// Options configure a Handler.
type Options struct {
	// MaxBodySize is the largest request body accepted; larger ones get 413. 0 means no limit.
	MaxBodySize int64
	// ParseMultipart has the server parse multipart/form-data bodies into fields and temporary
	// files (the cli runtime); otherwise PHP gets the body as sent and parses it itself.
	ParseMultipart bool
	// TempDir receives uploaded files and large bodies while their request runs; empty means
	// os.TempDir().
	TempDir string
	// WriteTimeout bounds each write to the client; a client that takes longer is dropped.
	// 0 means no limit.
	WriteTimeout time.Duration
	// BodyTimeout bounds the time between two reads of a request body (http.body_timeout,
	// nginx's client_body_timeout; bodytimeout.go): a client that stalls longer gets 408.
	// 0 means no limit.
	BodyTimeout time.Duration
	// Limits bound what a client may send.
	Limits Limits
	// Root, if set, is the document root: its files are served by the server itself, and in
	// classic mode it says which script runs (docroot.Root.Resolve).
	Root *docroot.Root
	// SendfileDirs are directories, absolute and clean, whose files PHP may name with
	// X-Sendfile besides Root's (http.sendfile_dirs).
	SendfileDirs []string
	// Classic runs each request's own script under Root (classic mode) instead of handing every
	// request that names no file to the worker script.
	Classic bool
	// ServerName is SERVER_NAME for scripts under Root (http.server_name); empty means the
	// address the connection arrived on.
	ServerName string
	// AccessLog, if set, logs one record per request (accesslog.go); it can be turned on, off
	// or elsewhere while the server runs.
	AccessLog *AccessLog
	// Logger receives the access log and request errors.
	Logger *slog.Logger
	// Observer, if set, is told about every finished request.
	Observer Observer
	// TrustedProxies are the peers whose X-Forwarded-For, -Proto, -Host and Forwarded headers
	// set the client address, scheme and host PHP sees (http.trusted_proxies; proxy.go).
	TrustedProxies []netip.Prefix

	// WebSocket, if set, takes over the requests it Wants (WebSocket upgrades, worker mode),
	// with the request as PHP would see it (internal/websocket).
	WebSocket Upgrader
}

// Upgrader takes over WebSocket upgrade requests, and answers that subscribe to its channels
// as event streams (EventStream reports whether it took the answer); *websocket.Hub is one.
type Upgrader interface {
	Wants(r *http.Request) bool
	Upgrade(w http.ResponseWriter, r *http.Request, req *protocol.Request)
	EventStream(w http.ResponseWriter, r *http.Request, status int, headers []protocol.Field) bool
}

// Observer receives one call per finished request, for metrics.
type Observer interface {
	Request(method string, status int, duration time.Duration, bytesIn, bytesOut int64)
}

// Handler serves HTTP requests from PHP workers.
type Handler struct {
	run  Runner
	opts Options
	log  *slog.Logger
	bufs sync.Pool // *[]byte frame and body buffers

	spills    atomic.Int64 // answers waiting in temporary files (answer.go)
	maxSpills int64        // past it, an answer that fits in memory stays there
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that runs requests on r.
func NewHandler(r Runner, opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{run: r, opts: opts, log: opts.Logger, maxSpills: maxSpills()}
	h.bufs.New = func() any {
		b := make([]byte, 0, 4096)
		return &b
	}
	return h
}

// multipartChooser is a Runner that says, per request, whether the server parses multipart
// bodies, over Options.ParseMultipart: a reload may change the workers' concurrency, and with
// it who parses them.
type multipartChooser interface {
	ParseMultipart() bool
}

// parseMultipart says whether the server parses this request's multipart body itself.
func (h *Handler) parseMultipart() bool {
	if c, ok := h.run.(multipartChooser); ok {
		return c.ParseMultipart()
	}
	return h.opts.ParseMultipart
}

// maxSpills returns how many answers may wait in temporary files before an answer that fits in
// memory stays there: a quarter of the descriptors the process may open (RLIMIT_NOFILE), at
// least 64.
func maxSpills() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	return max(64, int64(rl.Cur/4))
}

// maxPooledBuffer is the largest buffer kept for reuse.
const maxPooledBuffer = 256 << 10

// memoryBody is how much of a request body is held in memory; the rest waits in a temporary
// file until a worker takes the request (nginx's client_body_buffer_size, larger).
const memoryBody = 128 << 10

// spillWrite is how much of a body goes to its temporary file in one write.
const spillWrite = 64 << 10

func (h *Handler) getBuf() *[]byte { return h.bufs.Get().(*[]byte) }

func (h *Handler) putBuf(b *[]byte) {
	worker.Poison(*b)
	if cap(*b) <= maxPooledBuffer {
		*b = (*b)[:0]
		h.bufs.Put(b)
	}
}

// tempFile returns an empty temporary file that is already unlinked: it disappears with its
// descriptor, whatever happens to the process.
func (h *Handler) tempFile() (*os.File, error) {
	f, err := os.CreateTemp(h.opts.TempDir, "peregrine-body-")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return f, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	access := h.opts.AccessLog.logger()
	timed := h.opts.Observer != nil || access != nil
	var start time.Time
	if timed {
		start = time.Now()
	}
	rw := &countingWriter{ResponseWriter: w}
	r, bodyDone := withBodyTimeout(w, r, h.opts.BodyTimeout)
	// Deferred: a request broken off (panic(http.ErrAbortHandler), its answer cut short or its
	// client gone) is logged and counted too, one record per request (docs/operations.md).
	returned := false
	defer func() {
		bodyDone()
		if !timed {
			return
		}
		if !returned && rw.status == 0 {
			rw.status = http.StatusInternalServerError // a bug's panic, before any answer
		}
		if h.opts.Observer != nil {
			h.opts.Observer.Request(r.Method, rw.status, time.Since(start), rw.bytesIn, rw.bytes)
		}
		if access != nil {
			logAccess(access, r, rw, start) // accesslog.go
		}
	}()
	h.serve(rw, r)
	returned = true
}

// serve handles one request, and records in w the pid of the worker that ran it, if any, and
// the size of the request body it read.
func (h *Handler) serve(w *countingWriter, r *http.Request) {
	if status, msg := checkRequest(r, h.opts.Limits); status != 0 {
		w.Header().Set("Connection", "close")
		httpError(w, status, msg)
		return
	}
	dropHeaders(r.Header)
	var target docroot.Target
	if root := h.opts.Root; root != nil {
		if h.opts.Classic {
			target = root.Resolve(r.URL.Path)
		} else {
			target = root.ResolveWorker(r.URL.Path)
		}
		if !target.RunsPHP() {
			root.Serve(w, r, target)
			return
		}
	}
	if h.opts.MaxBodySize > 0 && r.ContentLength > h.opts.MaxBodySize {
		httpError(w, http.StatusRequestEntityTooLarge, "request body larger than http.max_body_size")
		return
	}
	if r.ContentLength != 0 {
		// Refuse before reading a body (and before net/http answers 100-continue) what would
		// be refused after.
		if err := h.run.Admit(); err != nil {
			h.fail(w, r, 0, err)
			return
		}
	}
	req := protocol.Request{Method: r.Method, Protocol: r.Proto}
	var host string
	req.RemoteAddr, req.RemotePort, req.Scheme, host = clientInfo(r, h.opts.TrustedProxies)
	req.URI = r.RequestURI
	if len(req.URI) > 0 && req.URI[0] == '/' {
		req.Path, req.Query = req.URI, ""
		for i := 0; i < len(req.URI); i++ {
			if req.URI[i] == '?' {
				req.Path, req.Query = req.URI[:i], req.URI[i+1:]
				break
			}
		}
	} else {
		req.Path, req.Query = r.URL.EscapedPath(), r.URL.RawQuery
	}
	if la, ok := r.Context().Value(localAddrKey{}).(*localAddr); ok {
		req.ServerAddr, req.ServerPort = la.host, la.port
	}
	if h.opts.Root != nil {
		serverName := h.opts.ServerName
		if serverName == "" {
			serverName = req.ServerAddr // never the client's Host header (docs/security.md)
		}
		for _, p := range h.opts.Root.Params(target, serverName) {
			req.Params = append(req.Params, protocol.Field{Name: p.Name, Value: p.Value})
		}
	}

	// The request's bytes are the handler's until its call goes to the pool, then the call's.
	st := &requestState{}
	own := &st.own
	own.h = h
	defer func() {
		if own != nil {
			own.release()
		}
	}()
	body := &own.body
	var uploads *upload
	if h.parseMultipart() && isMultipart(r.Header.Get("Content-Type")) {
		u, status, err := parseMultipart(r, h.opts.MaxBodySize, h.opts.Limits.MaxInputVars, h.opts.TempDir)
		own.uploads = u
		if err != nil {
			if status == http.StatusRequestTimeout && r.ProtoMajor == 1 {
				w.Header().Set("Connection", "close")
			}
			httpError(w, status, err.Error())
			return
		}
		uploads = u
		w.bytesIn = u.size
		req.Form, req.Files = u.form, u.files
	} else if r.ContentLength != 0 {
		status, err := body.read(h, r)
		w.bytesIn = body.size
		if err != nil {
			if status == http.StatusRequestTimeout && r.ProtoMajor == 1 {
				w.Header().Set("Connection", "close")
			}
			httpError(w, status, err.Error())
			return
		}
	}
	req.Headers = make([]protocol.Field, 0, 16)
	req.Headers = append(req.Headers, protocol.Field{Name: "host", Value: host})
	for name, values := range r.Header {
		if name == "Content-Length" && uploads == nil && r.ContentLength < 0 {
			continue // chunked: replaced by the real length below
		}
		for _, v := range values {
			req.Headers = append(req.Headers, protocol.Field{Name: name, Value: v})
		}
	}
	if r.ContentLength < 0 && uploads == nil {
		req.Headers = append(req.Headers, protocol.Field{Name: "content-length", Value: strconv.FormatInt(body.size, 10)})
	}
	if h.opts.WebSocket != nil && h.opts.WebSocket.Wants(r) {
		h.opts.WebSocket.Upgrade(w, r, &req)
		return
	}

	frameBuf := h.getBuf()
	own.frame = frameBuf
	var frame []byte
	var err error
	if body.file != nil {
		frame, err = protocol.AppendRequestHead((*frameBuf)[:0], 0, &req, body.size)
	} else {
		req.Body = body.mem()
		frame, err = protocol.AppendRequest((*frameBuf)[:0], 0, &req)
	}
	if err != nil {
		if errors.Is(err, protocol.ErrTooLarge) {
			httpError(w, http.StatusRequestEntityTooLarge, "request too large to hand to PHP")
		} else {
			httpError(w, http.StatusBadRequest, "request contains a NUL byte where none is allowed")
		}
		return
	}
	*frameBuf = frame[:0]

	a := &st.answer
	a.w, a.r, a.h, a.bufs = w, r, h, &h.bufs
	a.conn, _ = r.Context().Value(localAddrKey{}).(*localAddr)
	defer a.release()
	call := &st.call
	call.Frame, call.Answer, call.Owner = frame, a, own
	if body.file != nil {
		call.Body = body.file
	}
	own = nil // the call's now: PHP may read its body after its answer, after this returns
	pid, err := h.run.Do(r.Context(), call)
	w.pid = pid
	if err == nil && !a.streaming && r.Context().Err() != nil {
		// The script ran to its end (a sequential worker is not stopped while it runs, as
		// PHP-FPM's is not), but its client left meanwhile: there is nobody to answer.
		err = r.Context().Err()
	}
	switch {
	case err == nil && h.opts.WebSocket != nil && !a.streaming && h.opts.WebSocket.EventStream(w, r, a.status, a.headers):
		// Held by the hub as a server-sent event stream until the client leaves.
	case err == nil:
		a.finish()
	case a.streaming:
		// The status is sent already: all that can be said is to break the connection off.
		if !errors.Is(err, worker.ErrAbandoned) { // a client that left needs no error line
			h.log.Error("request failed after its answer began", "pid", pid, "method", r.Method, "path", r.URL.Path, "err", err)
		}
		panic(http.ErrAbortHandler)
	default:
		h.fail(w, r, pid, err)
	}
}

// fail answers a request that did not get a response from PHP: the one place where a failure
// becomes a status. A request whose client left gets none: fail panics with
// http.ErrAbortHandler (ServeHTTP records it first).
func (h *Handler) fail(w *countingWriter, r *http.Request, pid int, err error) {
	var pe *pool.Error
	switch {
	case errors.As(err, &pe):
		if pe.RetryAfter {
			w.Header().Set("Retry-After", "1")
		}
		switch pe.Status {
		// The client is told what happened, never the server's config keys: those are for the log.
		case http.StatusServiceUnavailable:
			h.log.Warn("request refused: no PHP worker available", "method", r.Method, "path", r.URL.Path, "err", err)
			httpError(w, pe.Status, "no PHP worker is available; try again later")
		case http.StatusGatewayTimeout:
			// A concurrent worker's request is cancelled and the worker kept; otherwise the
			// worker was killed with it.
			what := "request exceeded workers.exec_timeout; worker killed"
			if errors.Is(err, worker.ErrCancelled) {
				what = "request exceeded workers.exec_timeout; request cancelled, its worker serves on"
			}
			h.log.Error(what, "pid", pid, "method", r.Method, "path", r.URL.Path)
			httpError(w, pe.Status, "the PHP worker did not answer in time")
		default:
			h.log.Error("request failed: worker failed", "pid", pid, "method", r.Method, "path", r.URL.Path, "err", err)
			httpError(w, pe.Status, "the PHP worker failed while handling the request; see the server log")
		}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away: there is nobody to answer. 499 for the log, as nginx's, and
		// no answer at all: the connection (or HTTP/2 stream) is broken off, as nginx closes
		// it, rather than answered with an empty 200 (what a handler that wrote nothing gets).
		w.status = 499
		panic(http.ErrAbortHandler)
	default:
		h.log.Error("request failed", "pid", pid, "method", r.Method, "path", r.URL.Path, "err", err)
		httpError(w, http.StatusInternalServerError, "internal error; see the server log")
	}
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, strconv.Itoa(status)+" "+http.StatusText(status)+": "+msg+"\n")
}

// requestBody is a request body read before its request is queued: in memory up to memoryBody,
// the rest in an unlinked temporary file.
type requestBody struct {
	buf  *[]byte
	file *os.File // the whole body when it outgrew memory, positioned at its start
	size int64
}

func (b *requestBody) mem() []byte {
	if b.buf == nil {
		return nil
	}
	return *b.buf
}

// read reads the whole body, refusing more than http.max_body_size with 413. Memory grows with
// the bytes that arrive, never ahead of them: a Content-Length is only a claim, and a client
// declaring gigabytes and sending nothing must not make the server allocate them.
func (b *requestBody) read(h *Handler, r *http.Request) (int, error) {
	limit := h.opts.MaxBodySize
	var rd io.Reader = r.Body
	if limit > 0 {
		rd = io.LimitReader(r.Body, limit+1)
	}
	b.buf = h.getBuf()
	buf := (*b.buf)[:0]
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= memoryBody {
				break
			}
			buf = slices.Grow(buf, min(2*len(buf)+4096, memoryBody)-len(buf))
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		*b.buf = buf
		b.size = int64(len(buf))
		if limit > 0 && b.size > limit {
			return http.StatusRequestEntityTooLarge, errors.New("request body larger than http.max_body_size")
		}
		if err == io.EOF {
			return b.check(r)
		}
		if err != nil {
			return readError(err)
		}
	}
	// Past memoryBody: the body goes to a file, memory first.
	f, err := h.tempFile()
	if err != nil {
		return http.StatusInternalServerError, fmt.Errorf("cannot hold the request body: %w", err)
	}
	b.file = f
	if _, err := f.Write(buf); err != nil {
		return http.StatusInternalServerError, fmt.Errorf("cannot hold the request body: %w", err)
	}
	// A write(2) per 64 KiB, however small the reads; not through the file's ReadFrom, which
	// bufio would hand the copy to, and which writes what each read returns.
	spill := bufio.NewWriterSize(f, spillWrite)
	n, err := io.Copy(struct{ io.Writer }{spill}, rd)
	b.size += n
	if ferr := spill.Flush(); ferr != nil && err == nil {
		return http.StatusInternalServerError, fmt.Errorf("cannot hold the request body: %w", ferr)
	}
	switch {
	case limit > 0 && b.size > limit:
		return http.StatusRequestEntityTooLarge, errors.New("request body larger than http.max_body_size")
	case err != nil:
		return readError(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return http.StatusInternalServerError, fmt.Errorf("cannot hold the request body: %w", err)
	}
	*b.buf = (*b.buf)[:0]
	return b.check(r)
}

// readError is the answer to a failed read of a request body: 408 when it stalled past
// http.body_timeout, 400 otherwise.
func readError(err error) (int, error) {
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, errors.New("request body larger than http.max_body_size")
	}
	if bodyTimedOut(err) {
		return http.StatusRequestTimeout, errBodyTimeout
	}
	return http.StatusBadRequest, errors.New("could not read the request body: " + err.Error())
}

// check compares the body with its declared length.
func (b *requestBody) check(r *http.Request) (int, error) {
	if r.ContentLength > 0 && b.size != r.ContentLength {
		return http.StatusBadRequest, errors.New("request body shorter than its Content-Length")
	}
	return 0, nil
}

func (b *requestBody) release(h *Handler) {
	if b.buf != nil {
		h.putBuf(b.buf)
		b.buf = nil
	}
	if b.file != nil {
		if worker.Poisoned {
			poisonFile(b.file, b.size)
		}
		_ = b.file.Close()
		b.file = nil
	}
}

// requestBytes are what a request hands PHP besides its head: the frame's buffer, the body (in
// memory or in a temporary file) and the uploaded files. The handler owns them until it hands
// its call to the pool; from then on the call does, and its Owner's Release is release
// (worker.Call says when that is: once the request has ended, its answer being long sent maybe).
type requestBytes struct {
	h       *Handler
	frame   *[]byte
	body    requestBody
	uploads *upload
}

// requestState is what handling one request allocates, in one piece: its answer, its call, and
// the bytes the call owns from its hand-over on, which may be released after the handler
// returned (so it lives until then).
type requestState struct {
	answer answer
	call   worker.Call
	own    requestBytes
}

// Release implements worker.Owner.
func (b *requestBytes) Release() { b.release() }

func (b *requestBytes) release() {
	if b.frame != nil {
		b.h.putBuf(b.frame)
		b.frame = nil
	}
	b.body.release(b.h)
	b.uploads.cleanup()
}

// poisonFile overwrites a released body's file in a poison build (worker.Poisoned), so that a
// writer still reading it sends poison rather than failing quietly.
func poisonFile(f *os.File, size int64) {
	junk := make([]byte, 32<<10)
	worker.Poison(junk)
	for off := int64(0); off < size; off += int64(len(junk)) {
		_, _ = f.WriteAt(junk[:min(int64(len(junk)), size-off)], off)
	}
}

// countingWriter records, for logs and metrics, the status and the bytes written, and the
// handler records in it the size of the request body and the worker that ran the request.
type countingWriter struct {
	http.ResponseWriter
	status  int
	bytes   int64
	bytesIn int64
	pid     int // 0: no worker ran it
}

func (c *countingWriter) WriteHeader(status int) {
	if c.status == 0 && status >= 200 { // a 103 Early Hints is not the answer's status
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
}

// ReadFrom keeps sendfile for static files: io.Copy reaches the inner writer's ReadFrom.
func (c *countingWriter) ReadFrom(src io.Reader) (int64, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := io.Copy(c.ResponseWriter, src)
	c.bytes += n
	return n, err
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(b)
	c.bytes += int64(n)
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

type localAddrKey struct{}

// localAddr is what the server keeps per connection: its local address, and the bytes of
// answers its requests hold in memory (answer.go: at most connAnswerMemory).
type localAddr struct {
	host, port string
	answerMem  atomic.Int64
}

// ConnContext records the local address of each connection once, so requests need not split
// it again, and the connection's answer memory; set it as http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	host, port, _ := net.SplitHostPort(c.LocalAddr().String())
	return context.WithValue(ctx, localAddrKey{}, &localAddr{host: host, port: port})
}
