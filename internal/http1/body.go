package http1

import (
	"errors"
	"io"
)

// body is a request's body as it arrives: Content-Length bytes, or chunks (RFC 9112 7.1) whose
// extensions and trailers are read and dropped.
type body struct {
	c            *conn
	chunked      bool
	remain       int64 // of the Content-Length body, or of the current chunk
	needContinue bool  // Expect: 100-continue, not answered yet
	sentContinue bool
	inChunk      bool // chunked: within a chunk's data
	eof          bool
	err          error // sticky
	closed       bool  // the handler returned: reads are over
}

var (
	errUnexpectedEOF = io.ErrUnexpectedEOF
	errBadChunk      = errors.New("malformed chunked encoding")
)

// maxChunkLine bounds a chunk-size line with its extensions, and a trailer line.
const maxChunkLine = 4 << 10

func (b *body) Read(p []byte) (int, error) {
	switch {
	case b.closed:
		return 0, errClosedBody
	case b.err != nil:
		return 0, b.err
	case b.eof:
		return 0, io.EOF
	case len(p) == 0:
		return 0, nil
	}
	if b.needContinue {
		b.needContinue = false
		if !b.c.s.closing.Load() {
			b.sentContinue = true
			if _, err := b.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return 0, b.fail(err)
			}
			if err := b.c.bw.Flush(); err != nil {
				return 0, b.fail(err)
			}
		}
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
	return err
}

// readN reads what is left of a Content-Length body, or of a chunk.
func (b *body) readN(p []byte) (int, error) {
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.c.br.Read(p)
	b.remain -= int64(n)
	if b.remain == 0 && !b.chunked {
		b.ended()
		return n, io.EOF
	}
	if err == io.EOF {
		err = errUnexpectedEOF
	}
	return n, err
}

func (b *body) readChunked(p []byte) (int, error) {
	if !b.inChunk {
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
		b.remain, b.inChunk = size, true
	}
	n, err := b.readN(p)
	if err != nil {
		return n, err
	}
	if b.remain == 0 {
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

func eofIsUnexpected(err error) error {
	if err == io.EOF {
		return errUnexpectedEOF
	}
	return err
}

// chunkLine reads one line of the chunked framing.
func (b *body) chunkLine() ([]byte, error) {
	h := headReader{left: maxChunkLine}
	line, err := h.line(b.c.br)
	if err == errHeadTooLarge {
		return nil, errBadChunk
	}
	return line, eofIsUnexpected(err)
}

// chunkSize reads a chunk-size line: hex digits, then extensions after ';', dropped.
func (b *body) chunkSize() (int64, error) {
	line, err := b.chunkLine()
	if err != nil {
		return 0, err
	}
	for i, ch := range line {
		if ch == ';' || ch == ' ' || ch == '\t' {
			line = line[:i]
			break
		}
	}
	if len(line) == 0 || len(line) > 15 {
		return 0, errBadChunk
	}
	var n int64
	for _, ch := range line {
		switch {
		case '0' <= ch && ch <= '9':
			ch -= '0'
		case 'a' <= ch && ch <= 'f':
			ch -= 'a' - 10
		case 'A' <= ch && ch <= 'F':
			ch -= 'A' - 10
		default:
			return 0, errBadChunk
		}
		n = n<<4 | int64(ch)
	}
	return n, nil
}

// maxTrailerLines bounds the trailer of a chunked body.
const maxTrailerLines = 100

// trailer reads the trailer lines after the last chunk up to the empty line.
func (b *body) trailer() error {
	for range maxTrailerLines {
		line, err := b.chunkLine()
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
	}
	return errBadChunk
}

// ended marks the body read to its end: from now the connection may be watched for a client
// that leaves (watch.go).
func (b *body) ended() {
	b.eof = true
	b.c.watch.bodyEnded()
}

func (b *body) Close() error { return nil }

// maxDrain is how much of a body its handler left unread is read and dropped to keep the
// connection for the next request, as net/http does; a longer rest ends the connection.
const maxDrain = 256 << 10

// drain reads what the handler left of the body after its answer, and reports whether the
// connection can carry another request.
func (b *body) drain(w *response) bool {
	defer func() { b.closed = true }()
	switch {
	case b.eof:
		return true
	case b.err != nil:
		return false
	case b.needContinue && !b.sentContinue:
		// The client waits for a 100 Continue before it sends the body: it never will.
		return false
	}
	n, err := io.CopyN(io.Discard, b, maxDrain+1)
	return n <= maxDrain && err == io.EOF
}
