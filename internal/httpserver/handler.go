// Package httpserver owns the HTTP side of Peregrine: it turns each http.Request into a REQUEST
// frame (parsing multipart uploads into temporary files on the way), has the pool run it, and
// writes the worker's RESPONSE back; pool and worker failures become 5xx status codes. It does
// not start or supervise processes.
package httpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// Runner runs one REQUEST frame on a PHP worker; *pool.Pool is one.
type Runner interface {
	Do(ctx context.Context, frame []byte) pool.Result
}

var _ Runner = (*pool.Pool)(nil)

// Options configure a Handler.
type Options struct {
	// MaxBodySize is the largest request body accepted; larger ones get 413. 0 means no limit.
	MaxBodySize int64
	// TempDir receives uploaded files while their request runs; empty means os.TempDir().
	TempDir string
	// AccessLog logs one line per request.
	AccessLog bool
	// Logger receives the access log and request errors.
	Logger *slog.Logger
	// Observer, if set, is told about every finished request.
	Observer Observer
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
	bufs sync.Pool // *[]byte frame buffers
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that runs requests on r.
func NewHandler(r Runner, opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{run: r, opts: opts, log: opts.Logger}
}

// maxPooledBuffer is the largest frame buffer kept for reuse.
const maxPooledBuffer = 256 << 10

func (h *Handler) getBuf() *[]byte {
	if b, ok := h.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 4096)
	return &b
}

func (h *Handler) putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuffer {
		*b = (*b)[:0]
		h.bufs.Put(b)
	}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &countingWriter{ResponseWriter: w}
	pid, bytesIn := h.serve(rw, r)
	if h.opts.Observer != nil {
		h.opts.Observer.Request(r.Method, rw.status, time.Since(start), bytesIn, rw.bytes)
	}
	if h.opts.AccessLog {
		h.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", rw.status),
			slog.Int64("bytes", rw.bytes), slog.Duration("duration", time.Since(start)), slog.Int("pid", pid),
			slog.String("remote", r.RemoteAddr))
	}
}

// serve handles one request and returns the pid of the worker that ran it, if any, and the
// size of the request body it read.
func (h *Handler) serve(w *countingWriter, r *http.Request) (pid int, bytesIn int64) {
	if h.opts.MaxBodySize > 0 && r.ContentLength > h.opts.MaxBodySize {
		httpError(w, http.StatusRequestEntityTooLarge, "request body larger than http.max_body_size")
		return 0, bytesIn
	}
	req := protocol.Request{Method: r.Method, Protocol: r.Proto, Scheme: "http"}
	if r.TLS != nil {
		req.Scheme = "https"
	}
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
	if host, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		req.RemoteAddr, req.RemotePort = host, port
	}
	if la, ok := r.Context().Value(localAddrKey{}).(*localAddr); ok {
		req.ServerAddr, req.ServerPort = la.host, la.port
	}

	buf := h.getBuf()
	defer h.putBuf(buf)
	var body []byte
	var uploads *upload
	if isMultipart(r.Header.Get("Content-Type")) {
		u, status, err := parseMultipart(r, h.opts.MaxBodySize, h.opts.TempDir)
		defer u.cleanup()
		if err != nil {
			httpError(w, status, err.Error())
			return 0, bytesIn
		}
		uploads = u
		bytesIn = u.size
		req.Form, req.Files = u.form, u.files
	} else if r.ContentLength != 0 {
		b, status, err := readBody(r, h.opts.MaxBodySize, (*buf)[:0])
		if err != nil {
			httpError(w, status, err.Error())
			return 0, bytesIn
		}
		body = b
		*buf = b[:0]
		bytesIn = int64(len(b))
	}
	req.Body = body
	req.Headers = make([]protocol.Field, 0, 16)
	req.Headers = append(req.Headers, protocol.Field{Name: "host", Value: r.Host})
	for name, values := range r.Header {
		if name == "Content-Length" && uploads == nil && r.ContentLength < 0 {
			continue // chunked: replaced by the real length below
		}
		for _, v := range values {
			req.Headers = append(req.Headers, protocol.Field{Name: name, Value: v})
		}
	}
	if r.ContentLength < 0 && uploads == nil {
		req.Headers = append(req.Headers, protocol.Field{Name: "content-length", Value: strconv.Itoa(len(body))})
	}

	frameBuf := h.getBuf()
	defer h.putBuf(frameBuf)
	frame, err := protocol.AppendRequest((*frameBuf)[:0], 0, &req)
	if err != nil {
		httpError(w, http.StatusBadRequest, "request contains a NUL byte where none is allowed")
		return 0, bytesIn
	}
	*frameBuf = frame[:0]

	res := h.run.Do(r.Context(), frame)
	if res.Err != nil {
		h.fail(w, r, res)
		return res.PID, bytesIn
	}
	resp, err := protocol.DecodeResponse(res.Payload)
	if err != nil {
		h.log.Error("worker sent a malformed response", "pid", res.PID, "err", err)
		httpError(w, http.StatusBadGateway, "the PHP worker sent a malformed response")
		return res.PID, bytesIn
	}
	hdr := w.Header()
	for _, f := range resp.Headers {
		key := http.CanonicalHeaderKey(f.Name)
		switch key {
		case "Content-Length", "Transfer-Encoding":
			continue // the body's real length is what counts
		}
		hdr[key] = append(hdr[key], f.Value)
	}
	hdr["Content-Length"] = []string{strconv.Itoa(len(resp.Body))}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
	return res.PID, bytesIn
}

// fail answers a request that did not get a response from PHP.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, res pool.Result) {
	switch {
	case errors.Is(res.Err, pool.ErrQueueFull), errors.Is(res.Err, pool.ErrAllocateTimeout), errors.Is(res.Err, pool.ErrStopped):
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, "no PHP worker available: "+res.Err.Error())
	case errors.Is(res.Err, worker.ErrExecTimeout):
		h.log.Error("request exceeded exec_timeout; worker killed", "pid", res.PID, "method", r.Method, "path", r.URL.Path)
		httpError(w, http.StatusGatewayTimeout, "the PHP worker did not answer within workers.exec_timeout")
	case errors.Is(res.Err, context.Canceled), errors.Is(res.Err, context.DeadlineExceeded):
		// The client went away while waiting: there is nobody to answer.
		w.(*countingWriter).status = 499
	default:
		h.log.Error("request failed: worker died", "pid", res.PID, "method", r.Method, "path", r.URL.Path, "err", res.Err)
		httpError(w, http.StatusBadGateway, "the PHP worker failed while handling the request; see the server log")
	}
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, strconv.Itoa(status)+" "+http.StatusText(status)+": "+msg+"\n")
}

// readBody reads the whole body into dst, refusing more than limit bytes with 413. The buffer
// grows with the bytes that arrive, never ahead of them: a Content-Length is only a claim, and a
// client declaring gigabytes and sending nothing must not make the server allocate them.
func readBody(r *http.Request, limit int64, dst []byte) ([]byte, int, error) {
	if n := r.ContentLength; n > 0 { // at most limit: the caller answered 413 otherwise
		for int64(len(dst)) < n {
			next := min(n, max(2*int64(len(dst)), minBodyBuffer))
			dst = slices.Grow(dst, int(next)-len(dst))
			m, err := io.ReadFull(r.Body, dst[len(dst):next])
			dst = dst[:len(dst)+m]
			if err != nil {
				return nil, http.StatusBadRequest, errors.New("request body shorter than its Content-Length")
			}
		}
		return dst, 0, nil
	}
	var rd io.Reader = r.Body
	if limit > 0 {
		rd = io.LimitReader(r.Body, limit+1)
	}
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := rd.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if limit > 0 && int64(len(dst)) > limit {
			return nil, http.StatusRequestEntityTooLarge, errors.New("request body larger than http.max_body_size")
		}
		if err == io.EOF {
			return dst, 0, nil
		}
		if err != nil {
			return nil, http.StatusBadRequest, errors.New("could not read the request body: " + err.Error())
		}
	}
}

// minBodyBuffer is the smallest step by which a body's buffer grows while it is read.
const minBodyBuffer = 64 << 10

// countingWriter records the status and the bytes written, for logs and metrics.
type countingWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (c *countingWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
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

type localAddr struct{ host, port string }

// ConnContext records the local address of each connection once, so requests need not split
// it again; set it as http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	host, port, _ := net.SplitHostPort(c.LocalAddr().String())
	return context.WithValue(ctx, localAddrKey{}, &localAddr{host: host, port: port})
}
