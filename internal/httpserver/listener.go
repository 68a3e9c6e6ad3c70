package httpserver

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
)

// Every open client connection costs the daemon a file descriptor, and so does every pipe to a
// worker. Idle keep-alive connections alone could use them all; a crashed worker could then not
// be restarted (pipe2: too many open files) and the pool would stay short. limitListener caps
// the connections so that a reserve of descriptors is always left for the workers.

// DefaultMaxConnections is the cap on client connections when http.max_connections is 0 and
// the descriptor limit leaves room for it.
const DefaultMaxConnections = 10000

// fdReserve is how many descriptors are kept for everything but client connections: the log,
// the admin listener, uploads being written, and per worker its four pipes and the ones a
// restart needs while the old process is still being reaped.
func fdReserve(workers int) int { return 64 + 16*workers }

// MaxConnections returns the cap on client connections for http.max_connections: configured
// when positive, otherwise DefaultMaxConnections lowered to what RLIMIT_NOFILE leaves after the
// workers' reserve (never below 16). Go's runtime has already raised the soft limit to the
// hard one at start (and gives child processes, the workers, the original back).
func MaxConnections(configured, workers int) int {
	if configured > 0 {
		return configured
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return DefaultMaxConnections
	}
	avail := int64(rl.Cur) - int64(fdReserve(workers))
	return int(max(16, min(DefaultMaxConnections, avail)))
}

// limitListener accepts at most n connections at once: at the cap, Accept waits for one to close
// instead of taking the descriptor. Waiting clients sit in the kernel's backlog. n <= 0 means
// MaxConnections(0, 0).
func limitListener(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		n = MaxConnections(0, 0)
	}
	return &capListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type capListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *capListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &capConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *capListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// capConn gives its slot back once, on the first Close.
type capConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// ReadFrom lets net/http reach the TCP connection's ReadFrom, so files go out by sendfile.
var _ io.ReaderFrom = (*capConn)(nil)

func (c *capConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// SyscallConn gives the socket under the connection, for http1's TCP_CORK around a file.
func (c *capConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errNoSocket
}

var errNoSocket = errors.New("not a socket")

// CloseWrite ends the sending side, so that a client still sending can read the answer before
// the connection closes (http1's closeWriteAndWait).
func (c *capConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
