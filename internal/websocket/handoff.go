package websocket

// handoff.go: direct mode's WebSocket connections (docs/direct.md, "WebSockets"). A worker
// that reads an upgrade gives the client's socket to the daemon over a unix socket
// (native/handoff.c writes the message and states who owns the socket at each step); Handoff
// receives them and is the listener an http.Server serves them from, with the front's own
// handler, so that the hub runs the handshake and holds the connection as in proxied mode.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// HandoffEnv names the handoff socket in the workers' environment.
const HandoffEnv = "PEREGRINE_HANDOFF"

// handoffTimeout bounds the reading of one message: a worker sends it whole at once.
const handoffTimeout = 5 * time.Second

// Handoff is the unix socket the workers hand connections to, and a net.Listener of them.
// Accept returns each connection with the bytes the worker had read of it replayed first.
type Handoff struct {
	ln       *net.UnixListener
	path     string
	maxBytes int // the longest message taken: a longer one is refused
	log      *slog.Logger
	conns    chan net.Conn
	done     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup

	mu        sync.Mutex
	receiving map[*net.UnixConn]struct{} // messages being read: Close cuts them short
}

// ListenHandoff listens on a new unix socket in dir for messages of up to maxBytes of request.
func ListenHandoff(dir string, maxBytes int, log *slog.Logger) (*Handoff, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path := fmt.Sprintf("%s/peregrine-handoff-%d-%s.sock", dir, os.Getpid(), randomHex(4))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("the WebSocket handoff socket: %w", err)
	}
	h := &Handoff{ln: ln, path: path, maxBytes: maxBytes, log: log, conns: make(chan net.Conn), done: make(chan struct{}),
		receiving: make(map[*net.UnixConn]struct{})}
	h.wg.Add(1)
	go h.run()
	return h, nil
}

// Path is the socket's path, for HandoffEnv.
func (h *Handoff) Path() string { return h.path }

func (h *Handoff) run() {
	defer h.wg.Done()
	var pause time.Duration
	for {
		uc, err := h.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or buffers for a moment: stopping here would leave workers
			// handing sockets to a listener nobody accepts on, their clients hanging.
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			h.log.Warn("accepting a WebSocket handoff failed; retrying", "err", err, "in", pause.String())
			select {
			case <-time.After(pause):
				continue
			case <-h.done:
				return
			}
		}
		pause = 0
		h.mu.Lock()
		select {
		case <-h.done: // Close has cut the others: this one goes too
			h.mu.Unlock()
			_ = uc.Close()
			return
		default:
		}
		_ = uc.SetReadDeadline(time.Now().Add(handoffTimeout)) // before Close can cut it
		h.receiving[uc] = struct{}{}
		h.mu.Unlock()
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			c, err := receive(uc, h.maxBytes)
			h.mu.Lock()
			delete(h.receiving, uc)
			h.mu.Unlock()
			_ = uc.Close()
			if err != nil {
				h.log.Warn("a WebSocket connection a worker handed over was dropped", "err", err)
				return
			}
			select {
			case h.conns <- c:
			case <-h.done:
				_ = c.Close()
			}
		}()
	}
}

// receive reads one message, within uc's read deadline: the socket, its length and its bytes. Whatever goes wrong, every
// socket received is closed (the worker, which sent no whole message, answers the client).
func receive(uc *net.UnixConn, maxBytes int) (net.Conn, error) {
	buf := make([]byte, 4096)
	oob := make([]byte, syscall.CmsgSpace(4*4)) // room for a few: extras are closed
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	var fds []int
	if msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if r, err := syscall.ParseUnixRights(&m); err == nil {
				fds = append(fds, r...)
			}
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
	}
	if err != nil {
		closeAll()
		return nil, err
	}
	if len(fds) != 1 {
		closeAll()
		return nil, fmt.Errorf("a handoff message carried %d sockets, want 1", len(fds))
	}
	data, err := readMessage(buf[:n], uc, maxBytes)
	if err != nil {
		closeAll()
		return nil, err
	}
	f := os.NewFile(uintptr(fds[0]), "handed-over")
	c, err := net.FileConn(f) // a dup: f's copy is closed either way
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	return &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(data), c)}, nil
}

// errShortHandoff is a message that ended before its length: its worker failed mid-send.
var errShortHandoff = errors.New("the handoff message ended early (its worker left mid-send)")

// readMessage returns the bytes of a message whose first got bytes were read, reading the rest
// from r: a 4-byte big-endian length, then that many bytes.
func readMessage(got []byte, r io.Reader, maxBytes int) ([]byte, error) {
	var head [4]byte
	k := copy(head[:], got)
	if _, err := io.ReadFull(r, head[k:]); err != nil {
		return nil, errShortHandoff
	}
	size := int(binary.BigEndian.Uint32(head[:]))
	if size > maxBytes {
		return nil, fmt.Errorf("a handoff message of %d bytes, past %d", size, maxBytes)
	}
	data := make([]byte, size)
	k = copy(data, got[min(4, len(got)):])
	if _, err := io.ReadFull(r, data[k:]); err != nil {
		return nil, errShortHandoff
	}
	return data, nil
}

// Accept returns the next connection handed over.
func (h *Handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close stops taking connections, closes those received and not yet accepted, and removes
// the socket. Connections already accepted are their server's (and the hub's).
func (h *Handoff) Close() error {
	h.once.Do(func() {
		h.mu.Lock()
		close(h.done)
		for uc := range h.receiving { // a worker stalled mid-send does not hold the stop
			_ = uc.SetReadDeadline(time.Now())
		}
		h.mu.Unlock()
		_ = h.ln.Close() // removes the path too
	})
	h.wg.Wait()
	return nil
}

// Addr is the unix socket's address.
func (h *Handoff) Addr() net.Addr { return h.ln.Addr() }

var _ net.Listener = (*Handoff)(nil)

// replayConn reads the bytes its worker had read before the connection's own.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }
