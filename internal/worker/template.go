package worker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Template owns the process workers are forked from (workers.fork): the native runtime started
// with --template, which starts PHP (module startup, OPcache, opcache.preload) once and then
// clones itself for every worker, so that OPcache's shared memory and what PHP built at startup
// are shared copy-on-write between the workers, as between PHP-FPM's children. It owns the
// template process, its control socket (a SOCK_SEQPACKET socketpair on the template's fd 3) and
// the logging of its output; the workers it forks belong to whoever called Fork.
//
// A Template outlives its processes: Fork starts a new one when the current one has died, and
// Renew replaces it (new code, a new preload) for the workers forked from then on. Its methods
// are safe for concurrent use; forks happen one at a time.
//
//	  StartTemplate          Renew: the new one is ready         Close
//	───────────────> running ──────────────────────────> running ─────> closed
//	                  │   ^        (the old one is closed)
//	           exits  v   │ Fork starts a new one
//	                 dead ┘
type Template struct {
	optsMu sync.Mutex // guards opts: Configure may run while a fork starts a template
	opts   Options
	log    *slog.Logger

	mu     sync.Mutex // one fork at a time; guards the fields below
	cur    *templateProcess
	closed bool
}

// Configure gives the template the command (with its -d options), directory, environment and
// boot timeout of o for the template processes it starts from now on: Renew (a reset) then
// forks workers with them. The running template process keeps its own.
func (t *Template) Configure(o Options) {
	t.optsMu.Lock()
	defer t.optsMu.Unlock()
	t.opts.Argv, t.opts.Dir, t.opts.Env, t.opts.BootTimeout = o.Argv, o.Dir, o.Env, o.BootTimeout
}

func (t *Template) options() Options {
	t.optsMu.Lock()
	defer t.optsMu.Unlock()
	return t.opts
}

// ErrTemplateClosed is returned by Fork and Renew after Close.
var ErrTemplateClosed = errors.New("worker: the template is closed")

// templateStopTimeout is how long a template may take to exit once its control socket is
// closed, before it is killed.
const templateStopTimeout = 5 * time.Second

// templateProcess is one template process.
type templateProcess struct {
	pid    int
	proc   process
	conn   *net.UnixConn // our end of the control socket
	exited chan struct{} // closed once the process has been reaped
	err    error         // its exit error, set before exited is closed
	output output
}

// errTemplateGone says the template process exited or closed its control socket.
var errTemplateGone = errors.New("the template process is gone")

// StartTemplate starts a template process for workers that opts describes (the native runtime's
// Argv, with the worker's -d options and script, Dir, Env, Logger) and waits until PHP has
// started in it, ctx is cancelled or opts.BootTimeout passes. On failure the error wraps ErrBoot
// with the template's last output lines. opts.BootTimeout bounds the starts of later template
// processes too (Fork, Renew).
func StartTemplate(ctx context.Context, opts Options) (*Template, error) {
	if len(opts.Argv) == 0 {
		return nil, fmt.Errorf("%w: empty command", ErrBoot)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Template = nil
	t := &Template{opts: opts, log: opts.Logger.With("process", "template")}
	p, err := t.start(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBoot, err)
	}
	t.cur = p
	return t, nil
}

// PID returns the pid of the current template process, 0 if there is none.
func (t *Template) PID() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur == nil {
		return 0
	}
	return t.cur.pid
}

// Fork has the template fork a worker whose fds 3, 4, 1 and 2 are files[0] to files[3] (the
// request pipe's read end, the answer pipe's write end, stdout, stderr) and returns its pid. The
// worker is a child of this process, in a process group of its own, and dies with it; the
// caller waits for it and closes its copies of files. If the template has died, Fork starts a
// new one, once. ctx bounds the whole call; when it ends mid-way the template is replaced.
func (t *Template) Fork(ctx context.Context, files []*os.File) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, ErrTemplateClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if t.cur != nil {
		pid, err := t.forkLocked(ctx, files)
		if !errors.Is(err, errTemplateGone) {
			return pid, err
		}
		t.log.Warn("the worker template is gone; starting a new one", "err", err)
	}
	p, err := t.start(ctx)
	if err != nil {
		return 0, err
	}
	t.cur = p
	return t.forkLocked(ctx, files)
}

// forkLocked forks from the current template process. One that is gone is reaped and one whose
// fork ctx interrupted is abandoned (a reply may be on its way, which would answer the next
// request): either way there is no current process afterwards.
func (t *Template) forkLocked(ctx context.Context, files []*os.File) (int, error) {
	p := t.cur
	pid, err := p.fork(ctx, files)
	switch {
	case err == nil:
		return pid, nil
	case ctx.Err() != nil:
		t.cur = nil
		p.abandon()
		return 0, ctx.Err()
	case errors.Is(err, errTemplateGone):
		t.cur = nil
		return 0, fmt.Errorf("%w (pid %d, %s)", err, p.pid, exitStatus(p.close()))
	}
	return 0, err
}

// Renew replaces the template process with a new one, for new code and a new preload to reach
// the workers forked from then on; the workers forked before are left alone. If the new one
// fails to start, the old one stays and the error says why.
func (t *Template) Renew(ctx context.Context) error {
	p, err := t.start(ctx)
	if err != nil {
		return err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = p.close()
		return ErrTemplateClosed
	}
	old := t.cur
	t.cur = p
	t.mu.Unlock()
	if old != nil {
		t.log.Info("worker template renewed", "old_pid", old.pid, "pid", p.pid)
		_ = old.close()
	}
	return nil
}

// Close ends the template process and reaps it. The workers forked from it are not touched.
func (t *Template) Close() {
	t.mu.Lock()
	p := t.cur
	t.cur, t.closed = nil, true
	t.mu.Unlock()
	if p != nil {
		_ = p.close()
	}
}

// start starts a template process and waits for the pid it sends once PHP has started.
func (t *Template) start(ctx context.Context) (*templateProcess, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("worker template: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "template control"), os.NewFile(uintptr(fds[1]), "template control")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	_ = ours.Close()
	if err != nil {
		return nil, fmt.Errorf("worker template: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_ = fc.Close()
		return nil, fmt.Errorf("worker template: pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		_ = fc.Close()
		return nil, fmt.Errorf("worker template: pipe: %w", err)
	}
	opts := t.options()
	argv := append([]string{opts.Argv[0], "--template"}, opts.Argv[1:]...)
	proc, err := execProcess(argv, opts, outW, errW, theirs)
	closeAll(outW, errW)
	if err != nil {
		closeAll(outR, errR)
		_ = fc.Close()
		return nil, fmt.Errorf("worker template: %w", err)
	}
	p := &templateProcess{pid: proc.pid, proc: proc, conn: fc.(*net.UnixConn), exited: make(chan struct{})}
	p.output.log = t.log.With("pid", proc.pid)
	go func() {
		p.err = p.output.reap(proc, outR, errR)
		close(p.exited)
		_ = p.conn.SetDeadline(time.Now()) // a Fork waiting for a reply ends
	}()
	if err := p.awaitReady(ctx, opts.BootTimeout); err != nil {
		p.proc.kill()
		<-p.exited
		_ = p.conn.Close()
		return nil, fmt.Errorf("worker template: %w%s", err, p.describeExit())
	}
	t.log.Info("worker template started", "pid", p.pid)
	return p, nil
}

// awaitReady reads the template's first message, its pid, sent once PHP has started.
func (p *templateProcess) awaitReady(ctx context.Context, timeout time.Duration) error {
	if timeout > 0 {
		_ = p.conn.SetReadDeadline(time.Now().Add(timeout))
	}
	stop := context.AfterFunc(ctx, func() { _ = p.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	v, err := p.read()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, errTemplateGone):
		<-p.exited
		return errors.New("the template exited before PHP had started")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("PHP did not start within %s (boot_timeout)", timeout)
	case err != nil:
		return err
	case int(v) != p.pid:
		return fmt.Errorf("%w: the template said it is pid %d, not %d", ErrProtocol, v, p.pid)
	}
	return nil
}

// fork sends one fork request and reads the reply.
func (p *templateProcess) fork(ctx context.Context, files []*os.File) (int, error) {
	select {
	case <-p.exited:
		return 0, errTemplateGone
	default:
	}
	_ = p.conn.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = p.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	_, _, err := p.conn.WriteMsgUnix([]byte{'F'}, syscall.UnixRights(fds...), nil)
	runtime.KeepAlive(files)
	if err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			err = errTemplateGone
		}
		return 0, fmt.Errorf("worker template: sending the fork request: %w", err)
	}
	v, err := p.read()
	switch {
	case err != nil:
		return 0, fmt.Errorf("worker template: reading its reply: %w", err)
	case v < 0:
		return 0, fmt.Errorf("worker template: fork: %w", syscall.Errno(-v))
	}
	// The child moves itself to a group of its own too; whichever runs first, a Kill of the
	// group that follows finds it.
	_ = syscall.Setpgid(int(v), int(v))
	return int(v), nil
}

// read reads one int32 message: a pid, or -errno.
func (p *templateProcess) read() (int32, error) {
	var b [8]byte
	n, err := p.conn.Read(b[:])
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || err == nil && n == 0:
		return 0, errTemplateGone
	case err != nil:
		select {
		case <-p.exited:
			return 0, errTemplateGone
		default:
			return 0, err
		}
	case n != 4:
		return 0, fmt.Errorf("%w: a template message of %d bytes", ErrProtocol, n)
	}
	return int32(binary.NativeEndian.Uint32(b[:4])), nil
}

// close closes the control socket, which the template takes as its cue to exit, kills it if it
// has not within templateStopTimeout, and returns how it ended once it has been reaped.
func (p *templateProcess) close() error {
	_ = p.conn.Close()
	select {
	case <-p.exited:
	case <-time.After(templateStopTimeout):
		p.proc.kill()
		<-p.exited
	}
	return p.err
}

// abandon kills a template whose fork request was interrupted, then kills and reaps the worker
// it may have forked meanwhile, whose pid comes in a reply nobody waits for.
func (p *templateProcess) abandon() {
	p.proc.kill()
	go func() {
		<-p.exited
		_ = p.conn.SetReadDeadline(time.Now().Add(time.Second))
		for {
			v, err := p.read()
			if err != nil {
				break
			}
			if v > 0 {
				_ = syscall.Kill(-int(v), syscall.SIGKILL)
				_ = syscall.Kill(int(v), syscall.SIGKILL)
				if child, err := os.FindProcess(int(v)); err == nil {
					_, _ = child.Wait()
				}
			}
		}
		_ = p.conn.Close()
	}()
}

// describeExit says how the template ended and what it printed last.
func (p *templateProcess) describeExit() string {
	s := " (" + exitStatus(p.err) + ")"
	if tail := p.output.last(); tail != "" {
		s += "; its last output:\n" + tail
	}
	return s
}
