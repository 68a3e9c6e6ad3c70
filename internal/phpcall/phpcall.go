// Package phpcall owns the unix socket through which PHP workers call their server: pushing a
// job (Peregrine\Jobs::push) and using a key-value store (Peregrine\KV). The socket is created
// mode 0600 in a directory of its own (0700), and its path is given to every worker in the
// environment variable PEREGRINE_CALL_SOCKET; no PHP connection to a broker is needed. It does
// not know how jobs are stored or run: it calls a jobs.Set and kv.Stores.
//
// The protocol (docs/protocol.md, "Calls from PHP to the server"): the worker connects once
// and sends requests one at a time, each a 4-byte little-endian length and that many bytes of
// JSON; the server answers each with a frame of the same shape. A request larger than MaxRequest
// ends the connection after an error answer.
package phpcall

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/peregrinephp/peregrine/internal/jobs"
	"github.com/peregrinephp/peregrine/internal/kv"
)

// EnvVar is the environment variable that tells a worker where the socket is.
const EnvVar = "PEREGRINE_CALL_SOCKET"

// MaxRequest is the largest request frame: a job payload of jobs.MaxPayload bytes, JSON-escaped
// in the worst case (6 bytes per byte), and its envelope.
const MaxRequest = 6*jobs.MaxPayload + 64<<10

// callTimeout bounds one call to a broker.
const callTimeout = 30 * time.Second

// Options say what the socket serves.
type Options struct {
	Jobs   *jobs.Set           // nil: every push is refused as an unknown pipeline
	Stores map[string]kv.Store // kv.stores by name
	Logger *slog.Logger

	// WebSocket, if set, serves Peregrine\WebSocket::send, publish and close (ws.* calls).
	WebSocket WebSocket
}

// WebSocket is what the ws.* calls need of the server's connections; *websocket.Hub is one.
type WebSocket interface {
	Send(ctx context.Context, id string, data []byte, binary bool) error
	Publish(ctx context.Context, channel string, data []byte) error
	CloseConnection(ctx context.Context, id string, code int, reason string) error
}

// SetWebSocket has the socket serve the ws.* calls with ws from now on.
func (s *Server) SetWebSocket(ws WebSocket) {
	s.mu.Lock()
	s.opts.WebSocket = ws
	s.mu.Unlock()
}

// Server is a listening socket. Close stops it and ends its connections.
type Server struct {
	opts Options
	dir  string
	path string
	ln   net.Listener
	ctx  context.Context
	stop context.CancelFunc

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Listen creates the socket in a new private directory under dir (os.TempDir when empty) and
// starts serving it.
func Listen(dir string, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d, err := os.MkdirTemp(dir, "peregrine-call-")
	if err != nil {
		return nil, fmt.Errorf("phpcall: %w", err)
	}
	path := filepath.Join(d, "call.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		_ = os.RemoveAll(d)
		return nil, fmt.Errorf("phpcall: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		_ = os.RemoveAll(d)
		return nil, fmt.Errorf("phpcall: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{opts: opts, dir: d, path: path, ln: ln, ctx: ctx, stop: stop, conns: map[net.Conn]struct{}{}}
	s.wg.Go(s.accept)
	return s, nil
}

// Path returns the socket's path, for PEREGRINE_CALL_SOCKET.
func (s *Server) Path() string { return s.path }

// Close stops listening, ends every connection, waits for their goroutines and removes the
// socket's directory.
func (s *Server) Close() error {
	s.stop()
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	_ = os.RemoveAll(s.dir)
	return err
}

func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() == nil {
				s.opts.Logger.Error("the PHP call socket stopped accepting", "err", err)
			}
			return
		}
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				_ = c.Close()
			}()
			s.serve(c)
		})
	}
}

// Request is one call. Op says which; the other fields are its arguments.
type Request struct {
	Op       string            `json:"op"` // push, kv.get, kv.set, kv.has, kv.delete, kv.incr
	Pipeline string            `json:"pipeline,omitempty"`
	Payload  string            `json:"payload,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	Delay    float64           `json:"delay,omitempty"` // seconds
	Store    string            `json:"store,omitempty"`
	Key      string            `json:"key,omitempty"`
	Value    string            `json:"value,omitempty"`
	TTL      float64           `json:"ttl,omitempty"` // seconds; 0 = none
	By       int64             `json:"by,omitempty"`

	// ws.send, ws.publish, ws.close: Data is the message, or Data64 it in base64 (binary
	// data, which JSON cannot carry as it is).
	Connection string `json:"connection,omitempty"`
	Channel    string `json:"channel,omitempty"`
	Data       string `json:"data,omitempty"`
	Data64     []byte `json:"data64,omitempty"`
	Binary     bool   `json:"binary,omitempty"`
	Code       int    `json:"code,omitempty"`
}

// Answer is the answer to one call: Error, or what the call returns.
type Answer struct {
	Error string `json:"error,omitempty"`
	ID    string `json:"id,omitempty"`    // push
	Found bool   `json:"found,omitempty"` // kv.get, kv.has
	Value string `json:"value,omitempty"` // kv.get
	N     int64  `json:"n,omitempty"`     // kv.incr
}

func (s *Server) serve(c net.Conn) {
	r := bufio.NewReader(c)
	var head [4]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return // the worker went away
		}
		n := binary.LittleEndian.Uint32(head[:])
		if n > MaxRequest {
			_ = write(c, Answer{Error: fmt.Sprintf("a call of %d bytes, at most %d: a job payload may have at most %d bytes", n, MaxRequest, jobs.MaxPayload)})
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		var req Request
		var ans Answer
		if err := json.Unmarshal(buf, &req); err != nil {
			ans.Error = "malformed call: " + err.Error()
		} else {
			ans = s.call(&req)
		}
		if err := write(c, ans); err != nil {
			return
		}
	}
}

func write(c net.Conn, a Answer) error {
	b, _ := json.Marshal(a)
	frame := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err := c.Write(append(frame, b...))
	return err
}

// ErrUnknownStore is the error of a call naming a store kv.stores lacks.
var ErrUnknownStore = errors.New("no such store")

func (s *Server) call(req *Request) Answer {
	ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
	defer cancel()
	if req.Op == "push" {
		if req.Delay < 0 {
			return Answer{Error: "push: a negative delay"}
		}
		id, err := s.opts.Jobs.Push(ctx, req.Pipeline, req.Payload, req.Headers, time.Duration(req.Delay*float64(time.Second)))
		if err != nil {
			return Answer{Error: err.Error()}
		}
		return Answer{ID: id}
	}
	if strings.HasPrefix(req.Op, "ws.") {
		return s.websocket(ctx, req)
	}
	store, ok := s.opts.Stores[req.Store]
	if !ok {
		return Answer{Error: fmt.Sprintf("%s: %s %q (kv.stores)", req.Op, ErrUnknownStore, req.Store)}
	}
	var a Answer
	var err error
	switch req.Op {
	case "kv.get":
		a.Value, a.Found, err = store.Get(ctx, req.Key)
	case "kv.set":
		if req.TTL < 0 {
			return Answer{Error: "kv.set: a negative ttl"}
		}
		err = store.Set(ctx, req.Key, req.Value, time.Duration(req.TTL*float64(time.Second)))
	case "kv.has":
		a.Found, err = store.Has(ctx, req.Key)
	case "kv.delete":
		err = store.Delete(ctx, req.Key)
	case "kv.incr":
		a.N, err = store.Incr(ctx, req.Key, req.By)
	default:
		return Answer{Error: fmt.Sprintf("unknown call %q", req.Op)}
	}
	if err != nil {
		return Answer{Error: fmt.Sprintf("%s on store %s: %v", req.Op, req.Store, err)}
	}
	return a
}

// websocket serves the ws.* calls.
func (s *Server) websocket(ctx context.Context, req *Request) Answer {
	s.mu.Lock()
	ws := s.opts.WebSocket
	s.mu.Unlock()
	if ws == nil {
		return Answer{Error: req.Op + ": this server holds no WebSocket connections (worker mode has them; classic mode does not)"}
	}
	data := []byte(req.Data)
	if req.Data64 != nil {
		data = req.Data64
	}
	var err error
	switch req.Op {
	case "ws.send":
		err = ws.Send(ctx, req.Connection, data, req.Binary)
	case "ws.publish":
		err = ws.Publish(ctx, req.Channel, data)
	case "ws.close":
		err = ws.CloseConnection(ctx, req.Connection, req.Code, string(data))
	default:
		return Answer{Error: fmt.Sprintf("unknown call %q", req.Op)}
	}
	if err != nil {
		return Answer{Error: fmt.Sprintf("%s: %v", req.Op, err)}
	}
	return Answer{}
}
