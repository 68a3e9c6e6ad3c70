package httpserver

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// net/http normalises away two things a request smuggler relies on: it drops Content-Length
// when Transfer-Encoding is present, and it joins a header folded over several lines (obs-fold)
// into one value. A front proxy reading the same bytes differently would then disagree with us
// on where a request ends. headConn watches the raw bytes of each HTTP/1 connection as net/http
// reads them, finds each request head, and notes those two things for checkRequest.
//
// It follows the framing to skip bodies (Content-Length, chunked) and stops watching a
// connection it cannot follow: TLS (it then must sit above the TLS listener to see anything),
// HTTP/2, an Upgrade, or anything it does not understand; then rawHeadFlags reports nothing.

// headFlags describe one raw request head.
type headFlags uint8

const (
	headFolded headFlags = 1 << iota // a header line starting with a space or tab
	headCLTE                         // both Content-Length and Transfer-Encoding
	headTE                           // a Transfer-Encoding header
)

// maxPendingHeads bounds the heads read ahead of the handler on one connection (pipelining).
const maxPendingHeads = 64

// maxHeadLine is the most of a line the scanner keeps: enough for a request line with a long
// target; a longer line switches the scanner off for the connection.
const maxHeadLine = 64 << 10

// head is one request head as read from the wire.
type head struct {
	method, target string
	flags          headFlags
}

// watchHeads wraps ln so that every accepted connection is a *headConn.
func watchHeads(ln net.Listener) net.Listener { return headListener{ln} }

type headListener struct{ net.Listener }

func (l headListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &headConn{Conn: c}, nil
}

// headConn is a connection whose request heads are scanned as they are read.
type headConn struct {
	net.Conn
	mu    sync.Mutex
	s     headScanner
	heads []head // scanned, not yet claimed by a request
}

func (c *headConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.s.feed(p[:n], func(h head) {
			if len(c.heads) == maxPendingHeads {
				c.heads = c.heads[1:]
			}
			c.heads = append(c.heads, h)
		})
		c.mu.Unlock()
	}
	return n, err
}

// ReadFrom lets net/http reach the TCP connection's ReadFrom, so files go out by sendfile.
var _ io.ReaderFrom = (*headConn)(nil)

func (c *headConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// claim returns the flags of the head of the request with this method and target, forgetting
// it and any older unclaimed heads.
func (c *headConn) claim(method, target string) headFlags {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, h := range c.heads {
		if h.method == method && h.target == target {
			c.heads = c.heads[i+1:]
			return h.flags
		}
	}
	return 0
}

type headConnKey struct{}

// withHeadConn records c in ctx when it is a *headConn; set it in http.Server.ConnContext.
func withHeadConn(ctx context.Context, c net.Conn) context.Context {
	if hc, ok := c.(*headConn); ok {
		return context.WithValue(ctx, headConnKey{}, hc)
	}
	return ctx
}

// rawHeadFlags returns what the raw head of r showed, or 0 when it was not watched.
func rawHeadFlags(r *http.Request) headFlags {
	if r.ProtoMajor != 1 {
		return 0
	}
	hc, ok := r.Context().Value(headConnKey{}).(*headConn)
	if !ok {
		return 0
	}
	return hc.claim(r.Method, r.RequestURI)
}

// Scanner states.
const (
	scanHead      = iota // request line and header lines
	scanBody             // remain bytes of a Content-Length body
	scanChunkSize        // a chunk-size line
	scanChunkData        // remain bytes of chunk data
	scanChunkCRLF        // the line ending after chunk data
	scanTrailer          // trailer lines up to an empty one
	scanOff              // not following this connection any more
)

// headScanner follows HTTP/1 framing over a byte stream.
type headScanner struct {
	state  int
	remain int64
	line   []byte // the current line so far, without its end
	long   bool   // the current line was longer than maxHeadLine

	// The head being read.
	started      bool // the request line was read
	cur          head
	cl, te, up   bool
	chunked, v10 bool
	clValue      string
}

func (s *headScanner) feed(p []byte, emit func(head)) {
	for len(p) > 0 && s.state != scanOff {
		switch s.state {
		case scanBody, scanChunkData:
			n := int64(len(p))
			if n > s.remain {
				n = s.remain
			}
			p = p[n:]
			s.remain -= n
			if s.remain == 0 {
				if s.state == scanBody {
					s.state = scanHead
				} else {
					s.state = scanChunkCRLF
				}
			}
			continue
		}
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !s.long {
			if len(s.line)+len(chunk) > maxHeadLine {
				s.long = true
			} else {
				s.line = append(s.line, chunk...)
			}
		}
		if i < 0 {
			return
		}
		p = p[i+1:]
		line := bytes.TrimSuffix(s.line, []byte{'\r'})
		s.line = s.line[:0]
		long := s.long
		s.long = false
		s.onLine(line, long, emit)
	}
}

// onLine handles one complete line in a line state.
func (s *headScanner) onLine(line []byte, long bool, emit func(head)) {
	switch s.state {
	case scanHead:
		s.headLine(line, long, emit)
	case scanChunkSize:
		if long {
			s.state = scanOff
			return
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimRight(line, " \t")), 16, 64)
		switch {
		case err != nil || n < 0:
			s.state = scanOff
		case n == 0:
			s.state = scanTrailer
		default:
			s.state, s.remain = scanChunkData, n
		}
	case scanChunkCRLF:
		if len(line) != 0 {
			s.state = scanOff
			return
		}
		s.state = scanChunkSize
	case scanTrailer:
		if len(line) == 0 {
			s.state = scanHead
		}
	}
}

func (s *headScanner) headLine(line []byte, long bool, emit func(head)) {
	if !s.started {
		if len(line) == 0 {
			return // empty lines before a request line are allowed
		}
		if long || (len(line) > 0 && line[0] == 0x16) {
			s.state = scanOff // too long to match, or a TLS handshake
			return
		}
		method, rest, ok1 := bytes.Cut(line, []byte{' '})
		target, proto, ok2 := bytes.Cut(rest, []byte{' '})
		if !ok1 || !ok2 || string(proto) == "HTTP/2.0" {
			s.state = scanOff // HTTP/2 with prior knowledge, or not HTTP/1
			return
		}
		s.started = true
		s.cur = head{method: string(method), target: string(target)}
		s.v10 = string(proto) == "HTTP/1.0"
		return
	}
	if len(line) == 0 {
		s.endHead(emit)
		return
	}
	if line[0] == ' ' || line[0] == '\t' {
		s.cur.flags |= headFolded
		return
	}
	name, value, _ := bytes.Cut(line, []byte{':'})
	value = bytes.Trim(value, " \t")
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		s.cl, s.clValue = true, string(value)
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		s.cur.flags |= headTE
		if s.te {
			s.chunked = false // several Transfer-Encoding fields: net/http refuses them
		} else {
			s.chunked = bytes.EqualFold(value, []byte("chunked"))
		}
		s.te = true
	case bytes.EqualFold(name, []byte("Upgrade")):
		s.up = true
	}
}

// endHead is the empty line that ends a head: it is emitted, and the body skipped.
func (s *headScanner) endHead(emit func(head)) {
	h := s.cur
	if s.cl && s.te {
		h.flags |= headCLTE
	}
	emit(h)
	cl, te, up, chunked, v10, clValue := s.cl, s.te, s.up, s.chunked, s.v10, s.clValue
	s.started, s.cur, s.cl, s.te, s.up, s.chunked, s.v10, s.clValue = false, head{}, false, false, false, false, false, ""
	switch {
	case h.flags&(headCLTE|headFolded) != 0 || up:
		// The request is refused and its connection closed, or it switches protocols.
		s.state = scanOff
	case te && !v10:
		if chunked {
			s.state = scanChunkSize
		} else {
			s.state = scanOff // net/http refuses it and closes
		}
	case cl:
		n, err := strconv.ParseInt(clValue, 10, 64)
		switch {
		case err != nil || n < 0:
			s.state = scanOff
		case n > 0:
			s.state, s.remain = scanBody, n
		}
	}
}

// connContext is the http.Server.ConnContext of the public listener: ConnContext, plus the
// connection's head scanner for checkRequest.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return ConnContext(withHeadConn(ctx, c), c)
}
