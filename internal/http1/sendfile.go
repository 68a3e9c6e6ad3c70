package http1

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A file answer, as the standard library sends it, costs five system calls besides the
// request's read: TCP_CORK on, the head's write, an lseek to put the file's offset where the
// answer starts, sendfile, TCP_CORK off. A section of a file (an *io.SectionReader over an
// *os.File, which docroot gives) is sent here in two: the head written with MSG_MORE, which
// holds it in the kernel for what follows, as the cork did, and a sendfile from the section's
// offset, which leaves the file's own offset alone (so docroot's cached descriptors need no
// lseek) and, being the last of the answer, sends the head with the file's first bytes.
//
// A body written in one piece larger than the room left in the connection's buffer (a small
// file docroot holds in memory, a large PHP answer) leaves with what is buffered in one sendmsg
// of two iovecs, where bufio would write its buffer and then the rest.

// sockWriter is what a connection's bufio.Writer writes to: the connection, or, while more is
// set, its socket with MSG_MORE. While tail is set, a write sends tail after its own bytes in
// one sendmsg on the socket, and counts only its own.
type sockWriter struct {
	conn net.Conn
	c    *conn // for the write deadline (armWrite)
	more bool  // only when the connection has a socket
	tail []byte

	sock      syscall.RawConn // conn's socket, nil when it is not TCP; see socket
	sockKnown bool
}

// socket returns the connection's TCP socket, nil when it has none (TLS, a pipe).
func (s *sockWriter) socket() syscall.RawConn {
	if !s.sockKnown {
		s.sock, s.sockKnown = socketOf(s.conn), true
	}
	return s.sock
}

func (s *sockWriter) Write(p []byte) (int, error) {
	s.c.armWrite()
	switch {
	case s.tail != nil:
		n, err := s.writeTail(p)
		return min(n, len(p)), err
	case s.more:
		return s.sendmsg(syscall.MSG_MORE, p, nil)
	}
	return s.conn.Write(p)
}

// writeTail writes p and then s.tail: in one sendmsg on the socket, or by two writes when the
// connection has no socket of its own.
func (s *sockWriter) writeTail(p []byte) (int, error) {
	if s.socket() != nil {
		return s.sendmsg(0, p, s.tail)
	}
	n, err := s.conn.Write(p)
	if err == nil {
		var m int
		m, err = s.conn.Write(s.tail)
		n += m
	}
	return n, err
}

// writeFailer is a connection told of the writes to its socket that failed past its Write:
// sendmsg's and sendFile's (Server's doc).
type writeFailer interface{ WriteFailed() }

// failed tells the connection, when it asks (writeFailer), that a write to its socket failed.
func (s *sockWriter) failed() {
	if f, ok := s.conn.(writeFailer); ok {
		f.WriteFailed()
	}
}

// sendmsg is sendmsg on the connection's socket, which is told when it fails.
func (s *sockWriter) sendmsg(flags int, a, b []byte) (int, error) {
	n, err := sendmsg(s.socket(), flags, a, b)
	if err != nil {
		s.failed()
	}
	return n, err
}

// sendmsg writes a and then b on the socket raw, with flags and MSG_NOSIGNAL, in one system
// call when the socket has room for both; otherwise it waits for room and goes on where the
// kernel stopped. Write deadlines apply.
func sendmsg(raw syscall.RawConn, flags int, a, b []byte) (int, error) {
	var n int
	var err error
	werr := raw.Write(func(fd uintptr) bool {
		for n < len(a)+len(b) {
			var iov [2]unix.Iovec
			cnt := 0
			if n < len(a) {
				iov[cnt].Base = &a[n]
				iov[cnt].SetLen(len(a) - n)
				cnt++
			}
			if off := max(0, n-len(a)); off < len(b) {
				iov[cnt].Base = &b[off]
				iov[cnt].SetLen(len(b) - off)
				cnt++
			}
			msg := unix.Msghdr{Iov: &iov[0]}
			msg.SetIovlen(cnt)
			m, _, e := unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&msg)), uintptr(flags|unix.MSG_NOSIGNAL))
			switch e {
			case 0:
				n += int(m)
			case unix.EINTR:
			case unix.EAGAIN:
				return false // wait until the socket has room
			default:
				err = e
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return n, &net.OpError{Op: "write", Net: "tcp", Err: err}
	}
	return n, nil
}

// fileSection returns the file, offset and length that src reads, at most limit bytes of it,
// when src is a file under at most two *io.LimitedReaders (io.CopyN's over
// http.ServeContent's): an *io.SectionReader over an *os.File, or a seekable reader with a
// descriptor of its own (an *os.File, docroot's file handle). advance moves src's position
// past what was sent. A Range or a validator sends a file through ServeContent, and those
// readers then went out by the socket's ReadFrom, in pieces of one deadline each, which cut a
// slow steady reader off (sendFile waits with WriteTimeout each time the socket is full).
func fileSection(src io.Reader, limit int64) (file syscall.RawConn, off, n int64, advance func(int64), ok bool) {
	for range 2 {
		lr, isLR := src.(*io.LimitedReader)
		if !isLR {
			break
		}
		src, limit = lr.R, min(limit, lr.N)
	}
	var seeker io.Seeker
	var conn syscall.Conn
	size := int64(-1) // unknown: up to limit
	base := int64(0)
	switch r := src.(type) {
	case *io.SectionReader:
		outer, b, sz := r.Outer()
		f, isFile := outer.(*os.File)
		if !isFile {
			return nil, 0, 0, nil, false
		}
		seeker, conn, base, size = r, f, b, sz
	case interface {
		io.Seeker
		syscall.Conn
	}:
		seeker, conn = r, r
	default:
		return nil, 0, 0, nil, false
	}
	pos, err := seeker.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, 0, 0, nil, false
	}
	if file, err = conn.SyscallConn(); err != nil {
		return nil, 0, 0, nil, false
	}
	n = limit
	if size >= 0 {
		n = min(size-pos, limit)
	}
	advance = func(sent int64) { _, _ = seeker.Seek(sent, io.SeekCurrent) }
	return file, base + pos, max(0, n), advance, true
}

// errFileShrank is a file that ended before the length its answer declared.
var errFileShrank = errors.New("http1: file shorter than its declared length")

// sendFile writes the connection's buffered head with MSG_MORE and then n bytes of file from
// off by sendfile, through raw, the connection's socket (sockWriter.socket). Write deadlines
// apply to both, each wait for room in the socket with WriteTimeout of its own.
func (w *response) sendFile(raw syscall.RawConn, file syscall.RawConn, off, n int64) (int64, error) {
	out := &w.c.out
	out.more = true
	err := w.c.bw.Flush()
	out.more = false
	if err != nil {
		w.err = err
		return 0, err
	}
	var sent int64
	var serr error
	cerr := file.Control(func(ffd uintptr) {
		werr := raw.Write(func(sfd uintptr) bool {
			for sent < n {
				w.c.armWrite() // each wait for room has WriteTimeout
				m, e := syscall.Sendfile(int(sfd), int(ffd), &off, int(min(n-sent, 1<<30)))
				if m > 0 {
					sent += int64(m)
				}
				switch {
				case e == syscall.EINTR:
				case e == syscall.EAGAIN:
					return false // wait until the socket has room
				case e != nil:
					serr = &net.OpError{Op: "sendfile", Net: "tcp", Err: e}
					return true
				case m == 0:
					serr = errFileShrank
					return true
				}
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
	})
	w.written += sent
	if serr == nil {
		serr = cerr
	}
	if serr != nil {
		w.err = serr
		w.c.out.failed()
	}
	return sent, serr
}
