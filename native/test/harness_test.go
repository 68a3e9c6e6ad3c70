package nativetest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Frame types and flags of protocol version 3 (docs/protocol.md), encoded by hand here so these
// tests check the binary against the specification, not against the Go codec.
const (
	typeReady    = 1
	typeRequest  = 2
	typeResponse = 3
	typeStop     = 4
	typeError    = 5
	typeBody     = 6
	typeHints    = 7
	typeDone     = 8
	flagMore     = 1
	flagLast     = 4
	flagFlush    = 2
	maxBodyFrame = 1 << 20
)

var (
	root    string // the repository
	runtime string // bin/peregrine-php
	cases   string // testdata/cases, absolute
)

func TestMain(m *testing.M) {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	root = filepath.Clean(filepath.Join(wd, "..", ".."))
	runtime = filepath.Join(root, "bin", "peregrine-php")
	cases = filepath.Join(wd, "testdata", "cases")
	build := exec.Command("make", "-s", "native")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building bin/peregrine-php:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// field is a name/value pair: a header or a server parameter.
type field struct{ Name, Value string }

// request is what the server puts in a REQUEST frame.
type request struct {
	Method, URI, Scheme string
	Params              []field // server parameters (P pairs)
	Headers             []field
	Body                []byte
}

type frame struct {
	Type    uint8
	Flags   uint16
	ID      uint32
	Payload []byte
}

// answer is a worker's whole answer to one request.
type answer struct {
	Status  int
	Headers []field
	Body    string
	Frames  []frame
	Hints   [][]field
	Last    bool // the request's DONE frame said the worker exits after it
}

// Header returns the values of the header name (any case), in order.
func (a *answer) Header(name string) []string {
	var v []string
	for _, h := range a.Headers {
		if strings.EqualFold(h.Name, name) {
			v = append(v, h.Value)
		}
	}
	return v
}

// syncBuffer collects the process's stdout and stderr.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is one running peregrine-php with its two pipes.
type proc struct {
	cmd    *exec.Cmd
	in     *os.File // the server's end of fd 3
	out    *os.File // the server's end of fd 4
	rd     *bufio.Reader
	log    *syncBuffer
	nextID uint32
	wait   sync.Once
	err    error
}

// readTimeout only guards against a hung binary; no test asserts on time.
var readTimeout = 2 * time.Minute

// start runs argv (the binary, or valgrind and the binary) with the pipes on fds 3 and 4 and
// waits for READY. The process is killed when the test ends.
func start(t testing.TB, argv ...string) *proc {
	t.Helper()
	return startReady(t, startNoReady(t, argv...))
}

// startReady waits for p's READY.
func startReady(t testing.TB, p *proc) *proc {
	t.Helper()
	f := p.readFrame(t)
	if f.Type != typeReady || string(f.Payload) == "" {
		t.Fatalf("first frame: got type %d %q, want READY with the PHP version\n%s", f.Type, f.Payload, p.log)
	}
	return p
}

func startNoReady(t testing.TB, argv ...string) *proc {
	t.Helper()
	return startEnv(t, nil, argv...)
}

// startEnv is startNoReady with extra environment variables.
func startEnv(t testing.TB, env []string, argv ...string) *proc {
	t.Helper()
	return startFiles(t, env, nil, argv...)
}

// startFiles is startEnv with more files for the process, from fd 5 on.
func startFiles(t testing.TB, env []string, files []*os.File, argv ...string) *proc {
	t.Helper()
	r3, w3, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r4, w4, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{in: w3, out: r4, rd: bufio.NewReaderSize(r4, 1<<16), log: &syncBuffer{}, nextID: 1}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.ExtraFiles = append([]*os.File{r3, w4}, files...)
	p.cmd.Env = append(append(os.Environ(), "PEREGRINE_PROTOCOL=3"), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r3.Close()
	w4.Close()
	t.Cleanup(func() {
		p.in.Close()
		p.cmd.Process.Kill()
		p.waitExit(t)
		p.out.Close()
		if t.Failed() {
			t.Logf("peregrine-php output:\n%s", p.log)
		}
	})
	return p
}

// waitExit waits for the process to end and returns its exit code (-1 when killed).
func (p *proc) waitExit(t testing.TB) int {
	t.Helper()
	p.wait.Do(func() { p.err = p.cmd.Wait() })
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("waiting for peregrine-php: %v", p.err)
	}
	return 0
}

func (p *proc) readFrame(t testing.TB) frame {
	t.Helper()
	p.out.SetReadDeadline(time.Now().Add(readTimeout))
	var h [12]byte
	if _, err := io.ReadFull(p.rd, h[:]); err != nil {
		t.Fatalf("reading a frame header: %v\n%s", err, p.log)
	}
	if h[0] != 3 {
		t.Fatalf("frame version %d, want 3", h[0])
	}
	f := frame{Type: h[1], Flags: binary.LittleEndian.Uint16(h[2:]), ID: binary.LittleEndian.Uint32(h[4:])}
	f.Payload = make([]byte, binary.LittleEndian.Uint32(h[8:]))
	if _, err := io.ReadFull(p.rd, f.Payload); err != nil {
		t.Fatalf("reading a %d-byte payload: %v", len(f.Payload), err)
	}
	return f
}

// readFrameOrEOF reads a frame, or returns nil at end of file before one.
func (p *proc) readFrameOrEOF(t testing.TB) *frame {
	t.Helper()
	p.out.SetReadDeadline(time.Now().Add(readTimeout))
	if _, err := p.rd.Peek(1); err == io.EOF {
		return nil
	}
	f := p.readFrame(t)
	return &f
}

// expectEOF checks that fd 4 ends without another frame.
func (p *proc) expectEOF(t testing.TB) {
	t.Helper()
	p.out.SetReadDeadline(time.Now().Add(readTimeout))
	if b, err := p.rd.ReadByte(); err != io.EOF {
		t.Fatalf("after the last answer: got byte %d, err %v; want end of file", b, err)
	}
}

func appendFrame(dst []byte, typ uint8, id uint32, payload []byte) []byte {
	dst = append(dst, 3, typ, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, id)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

func encodeRequest(id uint32, r request) []byte {
	method, scheme := r.Method, r.Scheme
	if method == "" {
		method = "GET"
	}
	if scheme == "" {
		scheme = "http"
	}
	path, query, _ := strings.Cut(r.URI, "?")
	fields := []string{method, r.URI, path, query, "HTTP/1.1", "127.0.0.1", "40000", "127.0.0.1", "8080",
		scheme, "", "0", strconv.Itoa(len(r.Params))}
	for _, f := range r.Params {
		fields = append(fields, f.Name, f.Value)
	}
	for _, f := range r.Headers {
		fields = append(fields, strings.ToLower(f.Name), f.Value)
	}
	head := strings.Join(fields, "\x00")
	payload := binary.LittleEndian.AppendUint32(nil, uint32(len(head)))
	payload = append(append(payload, head...), r.Body...)
	return appendFrame(nil, typeRequest, id, payload)
}

// write sends raw bytes on fd 3 from a goroutine (a request larger than the pipe must not
// block the test before it reads the answer); the returned channel reports the write.
func (p *proc) write(b []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := p.in.Write(b)
		done <- err
	}()
	return done
}

// do sends r and reads its whole answer, checking the framing rules on the way.
func (p *proc) do(t testing.TB, r request) *answer {
	t.Helper()
	id := p.nextID
	p.nextID++
	written := p.write(encodeRequest(id, r))
	a := p.readAnswer(t, id)
	if err := <-written; err != nil {
		t.Fatalf("writing the request: %v", err)
	}
	return a
}

func splitPairs(t testing.TB, head []byte) []field {
	t.Helper()
	if len(head) == 0 {
		return nil
	}
	parts := strings.Split(string(head), "\x00")
	if len(parts)%2 != 0 {
		t.Fatalf("odd number of header fields: %q", head)
	}
	var fs []field
	for i := 0; i < len(parts); i += 2 {
		fs = append(fs, field{parts[i], parts[i+1]})
	}
	return fs
}

func (p *proc) readAnswer(t testing.TB, id uint32) *answer {
	t.Helper()
	return p.readAnswerFrom(t, id, p.readFrame(t))
}

// readAnswerFrom reads the answer whose first frame was already read.
func (p *proc) readAnswerFrom(t testing.TB, id uint32, f frame) *answer {
	t.Helper()
	a := &answer{}
	var body bytes.Buffer
	for ; ; f = p.readFrame(t) {
		a.Frames = append(a.Frames, f)
		if f.Type == typeError {
			t.Fatalf("ERROR frame: %s\n%s", f.Payload, p.log)
		}
		if f.ID != id {
			t.Fatalf("frame type %d has id %d, want %d", f.Type, f.ID, id)
		}
		switch {
		case f.Type == typeHints && len(a.Frames) == len(a.Hints)+1:
			a.Hints = append(a.Hints, splitPairs(t, f.Payload))
			continue
		case f.Type == typeResponse && body.Len() == 0 && a.Status == 0:
			if len(f.Payload) < 6 {
				t.Fatalf("RESPONSE payload of %d bytes", len(f.Payload))
			}
			a.Status = int(binary.LittleEndian.Uint16(f.Payload))
			headLen := int(binary.LittleEndian.Uint32(f.Payload[2:]))
			a.Headers = splitPairs(t, f.Payload[6:6+headLen])
			f.Payload = f.Payload[6+headLen:]
		case f.Type == typeBody && a.Status != 0:
		default:
			t.Fatalf("frame type %d out of place (frame %d of the answer)", f.Type, len(a.Frames))
		}
		if len(f.Payload) > maxBodyFrame {
			t.Fatalf("a frame carries %d bytes of body, more than 1 MiB", len(f.Payload))
		}
		body.Write(f.Payload)
		if f.Flags&flagMore == 0 {
			a.Body = body.String()
			// The request ends with its DONE frame, at once or after the work PHP does past
			// its answer.
			d := p.readFrame(t)
			if d.Type != typeDone || d.ID != id || len(d.Payload) != 0 {
				t.Fatalf("after the answer to %d: frame type %d for %d, want DONE", id, d.Type, d.ID)
			}
			a.Last = d.Flags&flagLast != 0
			return a
		}
	}
}
