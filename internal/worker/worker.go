// Package worker owns one PHP worker process: starting it with its protocol pipes, waiting for it
// to boot, running requests on it under the conversation rules of docs/protocol.md (the
// Exchange: order, request ids, sizes, what became of each request), reading its STDOUT and
// STDERR into the log, and stopping or killing it. It does not queue, retry or restart
// anything, and it knows nothing of HTTP: the pool decides what happens to a worker, and its
// package doc draws a worker's life.
//
// One Exchange runs a worker's requests at every concurrency (workers.concurrency), by one
// state machine. A request's life (every arrow is the worker's word or the server's act, never
// a guess from timing):
//
//	            written, with its id        its answer's last frame           DONE
//	(new) ─────────────────────> running ─────────────────────> answered ─────────> ended: Answered
//	  │ the worker said LAST or died   │ │ │
//	  │ before: nothing written        │ │ └ stopped (exec_timeout, its client left or reads too
//	  v                                │ │   slowly): above 1 CANCEL, then its DONE ──> ended: Failed
//	ended: Unread                      │ │   (or the worker killed after a grace); at 1 the worker
//	                                   │ │   is killed (it cannot cancel one request)
//	                                   │ └ DONE with LAST for it before its answer:
//	                                   │   a fatal error ended the process ─────────> ended: Failed (500)
//	                                   └ DONE with LAST, or the worker dies: by the rules (rules.go)
//	                                       id above the last request read ─────────> ended: Unread
//	                                       else ───────────────────────────────────> ended: Failed
//
// "The last request read" is what the worker's last word says; without one, at concurrency 1
// the request whose answer or DONE was awaited (the worker reads the next only after that
// DONE), above 1 every request in flight. At concurrency 1 the last word is the worker's last
// frame; above 1 the requests it read may still end after it.
//
// An exchange owns the bytes of the requests it writes until its writer is done and the worker
// said they ended, not merely until their answers are complete (call.go: Hold, Drop, Release);
// nothing frees a request's frame or body earlier.
//
// A process is executed, or forked from a Template (workers.fork, template.go); either way it
// is this process's child, watched from the moment it exists: its exit is noticed from its exit
// status (os/exec's Wait, os.Process.Wait for a fork), never from end of file on a pipe, which a
// child the worker spawned may hold open. Kill signals the whole process group.
package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// Options describe how to start a worker process.
type Options struct {
	// Argv is the full command, program first, with PHP's -d options already in place.
	Argv []string
	// Dir is the working directory; empty means the server's.
	Dir string
	// Env is the complete environment of the process.
	Env []string
	// BootTimeout bounds how long the process may take to send READY.
	BootTimeout time.Duration
	// Logger receives the worker's output and events; every record carries the pid.
	Logger *slog.Logger
	// Template, if set, forks the process (workers.fork) instead of executing Argv; Argv, Dir
	// and Env are then the template's own.
	Template *Template
	// ExtraFiles are more files for an executed process, on fds 5 and up: direct mode's
	// listening socket (docs/direct.md). A forked process does not get them.
	ExtraFiles []*os.File
}

// Errors returned by Exec and Start. They wrap more detail; test them with errors.Is.
var (
	ErrExecTimeout = errors.New("worker: request exceeded exec_timeout")
	ErrExited      = errors.New("worker: process exited")
	ErrProtocol    = errors.New("worker: protocol violation")
	ErrBoot        = errors.New("worker: failed to boot")
	// ErrExiting says the worker announced its exit (DONE with LAST: a fatal error, its script
	// left its loop): it reads no more requests.
	ErrExiting = errors.New("worker: the worker exits")
	// ErrFatal says a concurrent worker's request ended the process before its answer: a PHP
	// fatal error (or exit()) in its fiber, which the worker named with DONE and LAST. The
	// request gets 500, as a fatal error does under PHP-FPM.
	ErrFatal = errors.New("worker: the request hit a fatal error in PHP, which ended its worker")
	// ErrCancelled says a concurrent worker's request was cancelled (CANCEL) and ended, while
	// the worker serves on: it comes with ErrExecTimeout, which alone means the worker was
	// killed.
	ErrCancelled = errors.New("worker: the request was cancelled; its worker serves on")
	// ErrAbandoned is what an Answer returns (wrapped) to stop a request whose client is gone
	// while PHP still sends; Exec kills the worker and reports it, not as a protocol violation.
	ErrAbandoned = errors.New("worker: the answer's client is gone")
)

// outputGrace is how long the exit of a process waits for the last lines of its STDOUT and
// STDERR, which a child it spawned may keep open forever.
const outputGrace = 200 * time.Millisecond

// exitDrain is how long reads of the protocol pipe may still wait once the process has exited:
// what it wrote before is in the pipe already, and a child holding the pipe must not stall us.
const exitDrain = 100 * time.Millisecond

// Worker is one running PHP process.
type Worker struct {
	pid     int
	kill    func()        // SIGKILL to the process group, until the process has been reaped
	toPHP   *os.File      // fd 3 in the worker
	fromPHP *os.File      // fd 4 in the worker
	in      *bufio.Reader // reads pipe
	pipe    pipeReader    // fromPHP, after what checkQuiet read
	quiet   quietProbe    // checkQuiet's, made once
	out     []byte        // reused write buffer for batches
	payload []byte        // reused read buffer for answer frames
	nextID  uint32        // the last request id given (assign)
	opts    Options
	log     *slog.Logger
	started time.Time

	exited  chan struct{} // closed once the process has been reaped
	exitErr error         // set before exited is closed

	phpVersion string // from READY

	output output // its STDOUT and STDERR, logged; the last lines make the crash report
}

// Start starts the process and waits until it sends READY, ctx is cancelled or BootTimeout
// passes. On failure the process is killed and reaped, and the error wraps ErrBoot with PHP's
// own last output lines. ctx bounds the boot only; Stop and Kill end the process.
//
// With opts.Template set, the process is forked from the template instead of executed; from
// then on it is watched, run and stopped exactly as an executed one.
func Start(ctx context.Context, opts Options) (*Worker, error) {
	if len(opts.Argv) == 0 && opts.Template == nil {
		return nil, fmt.Errorf("%w: empty command", ErrBoot)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var files [8]*os.File // reqR, reqW, respR, respW, outR, outW, errR, errW
	for i := 0; i < len(files); i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(files[:i]...)
			return nil, fmt.Errorf("%w: pipe: %w", ErrBoot, err)
		}
		files[i], files[i+1] = r, w
	}
	reqR, reqW, respR, respW, outR, outW, errR, errW := files[0], files[1], files[2], files[3], files[4], files[5], files[6], files[7]
	var proc process
	var err error
	if opts.Template != nil {
		proc, err = forkProcess(ctx, opts.Template, opts.BootTimeout, reqR, respW, outW, errW)
	} else {
		proc, err = execProcess(opts.Argv, opts, outW, errW, append([]*os.File{reqR, respW}, opts.ExtraFiles...)...)
	}
	closeAll(reqR, respW, outW, errW) // the child's ends
	if err != nil {
		closeAll(reqW, respR, outR, errR)
		return nil, fmt.Errorf("%w: %w", ErrBoot, err)
	}
	w := &Worker{
		pid:     proc.pid,
		kill:    proc.kill,
		toPHP:   reqW,
		fromPHP: respR,
		opts:    opts,
		log:     opts.Logger.With("pid", proc.pid),
		started: time.Now(),
		exited:  make(chan struct{}),
	}
	w.pipe.f = respR
	w.in = bufio.NewReaderSize(&w.pipe, 64<<10)
	w.output.log = w.log
	go func() {
		w.exitErr = w.output.reap(proc, outR, errR)
		close(w.exited)
		_ = w.fromPHP.SetReadDeadline(time.Now().Add(exitDrain))
		_ = w.toPHP.SetWriteDeadline(time.Now())
	}()
	if err := w.awaitReady(ctx); err != nil {
		w.Kill()
		<-w.exited
		w.closeFiles()
		return nil, fmt.Errorf("%w: %w%s", ErrBoot, err, w.describeExit())
	}
	return w, nil
}

// process is a worker's OS process, however it came to be.
type process struct {
	pid  int
	wait func() error // reaps it; nil or an *exec.ExitError, as exec.Cmd.Wait returns
	kill func()       // SIGKILL to its process group; does nothing once it has been reaped
}

// execProcess starts argv as every PHP process of the server is started: in opts.Dir with
// opts.Env, in a process group of its own, killed if the server dies, with extra on fds 3 and up.
func execProcess(argv []string, opts Options, stdout, stderr *os.File, extra ...*os.File) (process, error) {
	life, kill := context.WithCancel(context.Background())
	cmd := exec.CommandContext(life, argv[0], argv[1:]...)
	cmd.Dir = opts.Dir
	cmd.Env = opts.Env
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // a terminal's Ctrl-C reaches the server only; it stops workers itself
		Pdeathsig: syscall.SIGKILL, // the workers never outlive a server that was killed
	}
	cmd.Cancel = func() error {
		// The group: a child the script started (exec, proc_open) goes with it.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err := cmd.Start(); err != nil {
		kill()
		return process{}, fmt.Errorf("%s: %w", argv[0], err)
	}
	return process{pid: cmd.Process.Pid, wait: cmd.Wait, kill: kill}, nil
}

// forkProcess has the template fork a worker with files on its fds 3, 4, 1 and 2. The child is
// this process's own child (CLONE_PARENT), so it is waited for as an executed one.
func forkProcess(ctx context.Context, t *Template, bootTimeout time.Duration, files ...*os.File) (process, error) {
	if bootTimeout > 0 { // a template that stopped answering must not hold the boot forever
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bootTimeout)
		defer cancel()
	}
	pid, err := t.Fork(ctx, files)
	if err != nil {
		return process{}, err
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return process{}, fmt.Errorf("forked worker %d: %w", pid, err)
	}
	var reaped atomic.Bool
	return process{
		pid: pid,
		wait: func() error {
			state, err := p.Wait()
			reaped.Store(true)
			if err == nil && !state.Success() {
				err = &exec.ExitError{ProcessState: state}
			}
			return err
		},
		kill: func() {
			if !reaped.Load() {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		},
	}, nil
}

// output logs what a process prints on its STDOUT and STDERR and keeps the last lines, for the
// report of its exit.
type output struct {
	log *slog.Logger

	mu      sync.Mutex
	tail    []string // the last lines of both streams, in the order they came
	errTail []string // the last lines of STDERR alone
}

// tailLines is how many lines of its output a worker's crash report quotes; errTailLines how
// many of STDERR's it keeps besides, since a page of HTML on STDOUT (a framework's error page)
// can push the error itself out of the common tail.
const (
	tailLines    = 10
	errTailLines = 5
)

// reap copies the process's output to the log until it has exited and been reaped, then kills
// what it left in its group and returns its exit error once its output has ended (or after
// outputGrace: a child that inherited STDOUT may keep the pipes open).
func (o *output) reap(p process, outR, errR *os.File) error {
	var outputs sync.WaitGroup
	outputs.Add(2)
	go o.copy(&outputs, outR, "stdout", slog.LevelInfo)
	go o.copy(&outputs, errR, "stderr", slog.LevelWarn)
	err := p.wait()
	// What the script started in its group goes with it, as with Kill: no process outlives
	// its worker (a child that called setsid has left the group and is on its own).
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	done := make(chan struct{})
	go func() { outputs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(outputGrace):
		closeAll(outR, errR)
	}
	return err
}

// copy logs the STDOUT or STDERR of the process line by line. Lines longer than the buffer are
// logged in pieces rather than held back.
func (o *output) copy(wg *sync.WaitGroup, r *os.File, stream string, level slog.Level) {
	defer wg.Done()
	defer r.Close()
	br := bufio.NewReaderSize(r, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			text := strings.TrimRight(string(line), "\r\n")
			o.remember(text, stream == "stderr")
			o.log.Log(context.Background(), level, text, "stream", stream)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

func (o *output) remember(line string, stderr bool) {
	o.mu.Lock()
	o.tail = keepLast(o.tail, line, tailLines)
	if stderr {
		o.errTail = keepLast(o.errTail, line, errTailLines)
	}
	o.mu.Unlock()
}

func keepLast(lines []string, line string, n int) []string {
	if len(lines) == n {
		copy(lines, lines[1:])
		lines = lines[:n-1]
	}
	return append(lines, line)
}

// last returns the last lines printed, joined: STDERR's that the common tail lost first, then
// the common tail.
func (o *output) last() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	in := make(map[string]bool, len(o.tail))
	for _, l := range o.tail {
		in[l] = true
	}
	var lines []string
	for _, l := range o.errTail {
		if !in[l] {
			lines = append(lines, l)
		}
	}
	return strings.Join(append(lines, o.tail...), "\n")
}

func (w *Worker) awaitReady(ctx context.Context) error {
	deadline := time.Now().Add(w.opts.BootTimeout)
	if w.opts.BootTimeout <= 0 {
		deadline = time.Time{}
	}
	if err := w.setReadDeadline(deadline); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = w.fromPHP.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	h, payload, err := w.readFrame()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case w.hasExited() && err != nil:
		return errors.New("the process exited before it was ready")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("no READY within %s (boot_timeout); does the script call Peregrine\\Worker::create()->serve()?", w.opts.BootTimeout)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		<-w.exited
		return errors.New("the process exited before it was ready")
	case err != nil:
		return fmt.Errorf("reading READY: %w", err)
	case h.Type == protocol.TypeError:
		return fmt.Errorf("the worker reported: %s", payload)
	case h.Type != protocol.TypeReady:
		return fmt.Errorf("%w: got %s before READY", ErrProtocol, h.Type)
	}
	w.phpVersion = string(payload)
	// The boot's deadline ends with the boot: a concurrent worker's reader waits for frames with
	// none, and would otherwise fail boot_timeout after the start, with every request in flight.
	return w.setReadDeadline(time.Time{})
}

// setReadDeadline sets the protocol pipe's read deadline, never later than the short drain that
// follows the process's exit.
func (w *Worker) setReadDeadline(t time.Time) error {
	if err := w.fromPHP.SetReadDeadline(t); err != nil {
		return err
	}
	if w.hasExited() {
		return w.fromPHP.SetReadDeadline(time.Now().Add(exitDrain))
	}
	return nil
}

func (w *Worker) hasExited() bool {
	select {
	case <-w.exited:
		return true
	default:
		return false
	}
}

// PID returns the process id.
func (w *Worker) PID() int { return w.pid }

// PHPVersion returns the PHP version the worker reported when it became ready.
func (w *Worker) PHPVersion() string { return w.phpVersion }

// Started returns when the process was started.
func (w *Worker) Started() time.Time { return w.started }

// Exited is closed once the process has exited and been reaped.
func (w *Worker) Exited() <-chan struct{} { return w.exited }

// ExitError describes how an exited process ended and what it printed last, wrapping
// ErrExited; nil while it runs.
// ExitedCleanly reports whether the process has exited with status 0: a direct-mode worker
// that left by itself (its max_jobs or max_memory), not a crash.
func (w *Worker) ExitedCleanly() bool {
	select {
	case <-w.exited:
		return w.exitErr == nil
	default:
		return false
	}
}

func (w *Worker) ExitError() error {
	select {
	case <-w.exited:
		return fmt.Errorf("%w%s", ErrExited, w.describeExit())
	default:
		return nil
	}
}

// KilledBySIGKILL reports whether the process ended by SIGKILL, which a PHP script does not
// send itself: the pool killed it (exec_timeout, a protocol error) or someone did from outside
// (an operator, the OOM killer). False while it runs.
func (w *Worker) KilledBySIGKILL() bool {
	select {
	case <-w.exited:
	default:
		return false
	}
	var ee *exec.ExitError
	if errors.As(w.exitErr, &ee) {
		ws, ok := ee.Sys().(syscall.WaitStatus)
		return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	return false
}

// describeExit says how the process ended and what it printed last; empty while it runs.
func (w *Worker) describeExit() string {
	select {
	case <-w.exited:
	default:
		return ""
	}
	var b strings.Builder
	b.WriteString(" (")
	b.WriteString(exitStatus(w.exitErr))
	tail := w.output.last()
	b.WriteString(")")
	if tail != "" {
		b.WriteString("; its last output:\n")
		b.WriteString(tail)
	}
	return b.String()
}

func exitStatus(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit code %d", ee.ExitCode())
	}
	if err != nil {
		return err.Error()
	}
	return "exit code 0"
}

// Kill sends SIGKILL to the worker's process group. It does not wait; Exited says when the
// process is gone.
func (w *Worker) Kill() {
	w.kill()
}

// Stop asks an idle worker to exit (STOP frame and end of file on its request pipe) and waits
// for it until ctx is done, then kills it. It returns once the process has been reaped.
func (w *Worker) Stop(ctx context.Context) {
	if ctx.Err() == nil {
		_ = w.toPHP.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = w.toPHP.Write(protocol.AppendFrame(nil, protocol.TypeStop, 0, nil))
		_ = w.toPHP.Close()
	}
	select {
	case <-w.exited:
	case <-ctx.Done():
		w.Kill()
		<-w.exited
	}
	w.closeFiles()
}

func (w *Worker) closeFiles() {
	_ = w.toPHP.Close()
	_ = w.fromPHP.Close()
}

// RSS returns the resident set size of the process in bytes, as the OS reports it. It is safe
// to call from any goroutine.
func (w *Worker) RSS() (int64, error) {
	return ReadRSS(w.pid)
}

// ReadRSS returns the resident set size of process pid in bytes, from /proc/PID/statm.
func ReadRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0, fmt.Errorf("rss of pid %d: %w", pid, err)
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		return 0, fmt.Errorf("rss of pid %d: parse statm %q: %w", pid, b, err)
	}
	return resident * int64(os.Getpagesize()), nil
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// Wait blocks until the process has exited or ctx is done.
func (w *Worker) Wait(ctx context.Context) error {
	select {
	case <-w.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
