package http1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"sync/atomic"
)

// body is a request's body as it arrives: Content-Length bytes, or chunks (RFC 9112 7.1) whose
// extensions and trailers are read and dropped.
type body struct {
	c       *conn
	chunked bool
	inChunk bool  // chunked: within a chunk's data
	total   int64 // chunked: the sizes declared so far
	excess  int64 // chunked: framing bytes beyond what the data allows (chunkSize)
	err     error // sticky
	closed  bool  // the handler returned: reads are over

	// What the answer's writer looks at, which may run on another goroutine than the
	// body's reader (a handler that reads the body on one and answers on another).
	remain atomic.Int64 // of the Content-Length body, or of the current chunk
	eof    atomic.Bool
	failed atomic.Bool // err is set

	// The 100 Continue: sent by the first read, unless the answer's head is out (answered),
	// where it would land within the answer. Guarded by the connection's contMu.
	needContinue bool // Expect: 100-continue, not answered yet
	sentContinue bool
	answered     bool
}

var (
	errUnexpectedEOF = io.ErrUnexpectedEOF
	errBadChunk      = errors.New("malformed chunked encoding")
)

// A chunk-size line with its extensions, and a trailer line, must fit in the read buffer
// (4 KiB, net/http's maxLineLength).

func (b *body) Read(p []byte) (int, error) {
	switch {
	case b.closed:
		return 0, errClosedBody
	case b.err != nil:
		return 0, b.err
	case b.eof.Load():
		return 0, io.EOF
	case len(p) == 0:
		return 0, nil
	}
	if err := b.sendContinue(); err != nil {
		return 0, b.fail(err)
	}
	var n int
	var err error
	if b.chunked {
		n, err = b.readChunked(p)
	} else {
		n, err = b.readN(p)
	}
	if err != nil && err != io.EOF {
		return n, b.fail(err)
	}
	return n, err
}

func (b *body) fail(err error) error {
	if err == io.EOF {
		err = errUnexpectedEOF
	}
	b.err = err
	b.failed.Store(true)
	return err
}

// sendContinue writes the 100 Continue a request with Expect: 100-continue waits for, on its
// body's first read, unless the answer's head is out already (as net/http: it would land
// within the answer, and break its framing) or the server is closing.
func (b *body) sendContinue() error {
	mu := &b.c.contMu
	mu.Lock()
	defer mu.Unlock()
	if !b.needContinue || b.answered {
		return nil
	}
	b.needContinue = false
	if b.c.s.closing.Load() {
		return nil
	}
	b.sentContinue = true
	if _, err := b.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
		return err
	}
	return b.c.bw.Flush()
}

// unanswered reports whether the client waits for a 100 Continue that it has not had and
// will not have, after the answer's head was marked out (answer): it never sends the body.
func (b *body) unanswered() bool {
	b.c.contMu.Lock()
	defer b.c.contMu.Unlock()
	return b.needContinue && !b.sentContinue
}

// answer marks the answer's head out: no 100 Continue may follow it. It returns what
// unanswered would.
func (b *body) answer() bool {
	b.c.contMu.Lock()
	defer b.c.contMu.Unlock()
	b.answered = true
	return b.needContinue && !b.sentContinue
}

// readN reads what is left of a Content-Length body, or of a chunk.
func (b *body) readN(p []byte) (int, error) {
	if remain := b.remain.Load(); int64(len(p)) > remain {
		p = p[:remain]
	}
	n, err := b.c.br.Read(p)
	remain := b.remain.Add(-int64(n))
	if remain == 0 && !b.chunked {
		b.ended()
		return n, io.EOF
	}
	if err == io.EOF {
		err = errUnexpectedEOF
	}
	return n, err
}

// readChunked reads chunk data into p: first every whole chunk already in the read buffer,
// copied out of it at once, so that a body sent in tiny chunks costs one call (and one write
// by its reader) per buffer, not per chunk; when none is whole, one chunk, or what has come
// of it, which may wait for input.
func (b *body) readChunked(p []byte) (int, error) {
	if !b.inChunk {
		if n, err := b.bufferedChunks(p); n > 0 || err != nil {
			return n, err
		}
		size, err := b.chunkSize()
		if err != nil {
			return 0, err
		}
		if size == 0 {
			if err := b.trailer(); err != nil {
				return 0, err
			}
			b.ended()
			return 0, io.EOF
		}
		b.remain.Store(size)
		b.inChunk = true
	}
	n, err := b.readN(p)
	if err != nil {
		return n, err
	}
	if b.remain.Load() == 0 {
		b.inChunk = false
		// The chunk's data ends with CRLF, exactly.
		crlf, err := b.c.br.Peek(2)
		if err != nil {
			return n, eofIsUnexpected(err)
		}
		if crlf[0] != '\r' || crlf[1] != '\n' {
			return n, errBadChunk
		}
		_, _ = b.c.br.Discard(2)
	}
	return n, nil
}

// bufferedChunks copies into p the data of the chunks that are whole in the read buffer (size
// line, data, CRLF) and fit in p, and consumes them; it never reads from the connection. It
// leaves the last chunk (and its trailer) to readChunked.
func (b *body) bufferedChunks(p []byte) (int, error) {
	buf, _ := b.c.br.Peek(b.c.br.Buffered())
	n, used := 0, 0
	defer func() { _, _ = b.c.br.Discard(used) }()
	for {
		i := lineEnd(buf[used:min(len(buf), used+bufSize)])
		if i < 0 {
			return n, nil
		}
		line := buf[used : used+i+1]
		size, err := parseChunkLine(line)
		if err != nil || size == 0 {
			return n, err
		}
		data := used + len(line)
		end := data + int(min(size, int64(len(buf))))
		if size > int64(len(p)-n) || end+2 > len(buf) {
			return n, nil // not whole, or not room for it: readChunked takes it
		}
		if err := b.account(size, len(line)); err != nil {
			return n, err
		}
		if buf[end] != '\r' || buf[end+1] != '\n' {
			used = data // the chunk's data, read, and its bad end as the error
			n += copy(p[n:], buf[data:end])
			return n, errBadChunk
		}
		n += copy(p[n:], buf[data:end])
		used = end + 2
	}
}

func eofIsUnexpected(err error) error {
	if err == io.EOF {
		return errUnexpectedEOF
	}
	return err
}

// chunkLine reads one line of the chunked framing, CRLF included.
func (b *body) chunkLine() ([]byte, error) {
	line, err := b.c.br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull:
		return nil, errBadChunk // longer than maxChunkLine: the read buffer
	case err != nil:
		return nil, eofIsUnexpected(err)
	}
	return line, nil
}

// chunkSize reads a chunk-size line and returns the size it declares.
func (b *body) chunkSize() (int64, error) {
	line, err := b.chunkLine()
	if err != nil {
		return 0, err
	}
	size, err := parseChunkLine(line)
	if err != nil {
		return 0, err
	}
	return size, b.account(size, len(line))
}

// parseChunkLine parses a chunk-size line, its LF included, as net/http does: it ends with
// CRLF and holds no other CR (net/http's rule since CVE-2025-22871: a bare LF is a line end to
// some readers and not to others); the size is hex digits, at most 2^63-1, followed by blanks
// to the end of the line, or by ';' and extensions, which are dropped. It scans by hand: the
// lines are a few bytes, shorter than what bytes.IndexByte pays to start.
func parseChunkLine(line []byte) (int64, error) {
	end := len(line) - 2
	if end < 1 || line[end] != '\r' {
		return 0, errBadChunk
	}
	var n uint64
	i := 0
	for ; i < end; i++ {
		ch := line[i]
		switch {
		case '0' <= ch && ch <= '9':
			ch -= '0'
		case 'a' <= ch && ch <= 'f':
			ch -= 'a' - 10
		case 'A' <= ch && ch <= 'F':
			ch -= 'A' - 10
		default:
			goto rest
		}
		if i == 16 {
			return 0, errBadChunk
		}
		n = n<<4 | uint64(ch)
	}
rest:
	if i == 0 || n > math.MaxInt64 {
		return 0, errBadChunk
	}
	ext := i < end && line[i] == ';'
	for ; i < end; i++ {
		if ch := line[i]; ch == '\r' || !ext && ch != ' ' && ch != '\t' {
			return 0, errBadChunk
		}
	}
	return int64(n), nil
}

// lineEnd returns the index of the first LF in buf, or -1; by hand, for the few bytes of a
// chunk-size line.
func lineEnd(buf []byte) int {
	for i, ch := range buf {
		if ch == '\n' {
			return i
		}
	}
	return -1
}

// account counts a chunk of size bytes declared by a line of lineLen bytes: a chunk that would
// take the body past MaxBodyBytes is refused before any of it is read, and, as net/http does,
// the framing may take 16 bytes a chunk and twice its data, no more, or a client could send
// kilobytes of extensions for every byte.
func (b *body) account(size int64, lineLen int) error {
	b.total += size
	if limit := b.c.s.MaxBodyBytes; limit > 0 && (size > limit || b.total > limit) {
		return &http.MaxBytesError{Limit: limit}
	}
	b.excess = max(b.excess+int64(lineLen)-16-2*size, 0)
	if b.excess > maxChunkExcess {
		return errors.New("chunked encoding contains too much non-data")
	}
	return nil
}

// maxChunkExcess is how far the framing of a chunked body may outgrow its data.
const maxChunkExcess = 16 << 10

// maxTrailerLines bounds the trailer of a chunked body.
const maxTrailerLines = 100

// trailer reads the trailer lines after the last chunk up to the empty line, and drops them;
// each must be a header line, as in a head, and all of them with the empty line must fit in
// the read buffer, as net/http bounds a trailer (it took one of 100 lines of 4 KiB).
func (b *body) trailer() error {
	size := 0
	for range maxTrailerLines {
		line, err := b.chunkLine()
		if err != nil {
			return err
		}
		if size += len(line); size > bufSize {
			return errBadChunk
		}
		if i := bytes.IndexByte(line, '\r'); i < 0 || i != len(line)-2 {
			return errBadChunk // CRLF, as every line of the framing
		}
		if line = line[:len(line)-2]; len(line) == 0 {
			return nil
		}
		if _, _, err := splitField(line); err != nil {
			return errBadChunk
		}
	}
	return errBadChunk
}

// ended marks the body read to its end: from now the connection may be watched for a client
// that leaves (watch.go).
func (b *body) ended() {
	b.eof.Store(true)
	b.c.watch.bodyEnded()
}

func (b *body) Close() error { return nil }

// maxDrain is how much of a body its handler left unread is read and dropped to keep the
// connection for the next request, as net/http does; a longer rest ends the connection.
const maxDrain = 256 << 10

// drain reads what the handler left of the body once it is done with it, and reports
// whether the connection can carry another request.
func (b *body) drain() bool {
	defer func() { b.closed = true }()
	switch {
	case b.eof.Load():
		return true
	case b.failed.Load():
		return false
	case b.unanswered():
		// The client waits for a 100 Continue before it sends the body: it never will.
		return false
	case !b.chunked && b.remain.Load() > maxDrain:
		return false
	}
	b.c.contMu.Lock()
	b.needContinue = false // reading to drop the body must not invite it
	b.c.contMu.Unlock()
	n, err := io.CopyN(io.Discard, b, maxDrain+1)
	return n <= maxDrain && err == io.EOF
}
