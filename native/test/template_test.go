package nativetest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// template is peregrine-php --template with our end of its control socket.
type template struct {
	cmd  *exec.Cmd
	ctl  *net.UnixConn
	log  *syncBuffer
	pid  int
	kids []int
}

// startTemplate runs argv (the binary, or valgrind and the binary) with --template after the
// binary, and reads the pid it sends once PHP has started; env is added to the environment.
func startTemplate(t *testing.T, env []string, argv ...string) *template {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ctl"), os.NewFile(uintptr(fds[1]), "ctl")
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		t.Fatal(err)
	}
	tp := &template{ctl: conn.(*net.UnixConn), log: &syncBuffer{}}
	at := slices.Index(argv, runtime) + 1
	argv = slices.Concat(argv[:at], []string{"--template"}, argv[at:])
	tp.cmd = exec.Command(argv[0], argv[1:]...)
	tp.cmd.ExtraFiles = []*os.File{theirs}
	tp.cmd.Env = append(append(os.Environ(), "PEREGRINE_PROTOCOL=3"), env...)
	tp.cmd.Stdout, tp.cmd.Stderr = tp.log, tp.log
	if err := tp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	t.Cleanup(func() {
		tp.ctl.Close()
		tp.cmd.Process.Kill()
		_ = tp.cmd.Wait()
		for _, pid := range tp.kids {
			syscall.Kill(pid, syscall.SIGKILL)
			if p, err := os.FindProcess(pid); err == nil {
				_, _ = p.Wait()
			}
		}
		if t.Failed() {
			t.Logf("template output:\n%s", tp.log)
		}
	})
	if tp.pid = tp.read(t); tp.pid != tp.cmd.Process.Pid {
		t.Fatalf("the template says it is pid %d, not %d", tp.pid, tp.cmd.Process.Pid)
	}
	return tp
}

// read reads one reply: a pid, or -errno.
func (tp *template) read(t *testing.T) int {
	t.Helper()
	tp.ctl.SetReadDeadline(time.Now().Add(readTimeout))
	var b [4]byte
	if n, err := tp.ctl.Read(b[:]); err != nil || n != 4 {
		t.Fatalf("reading from the template: %d bytes, %v\n%s", n, err, tp.log)
	}
	return int(int32(binary.NativeEndian.Uint32(b[:])))
}

// fork has the template fork a worker on new pipes; the worker is a proc without a cmd, whose
// exit status waitForked reads.
func (tp *template) fork(t *testing.T) (*proc, int) {
	t.Helper()
	r3, w3, _ := os.Pipe()
	r4, w4, _ := os.Pipe()
	logR, logW, _ := os.Pipe()
	rights := syscall.UnixRights(int(r3.Fd()), int(w4.Fd()), int(logW.Fd()), int(logW.Fd()))
	if _, _, err := tp.ctl.WriteMsgUnix([]byte{'F'}, rights, nil); err != nil {
		t.Fatal(err)
	}
	r3.Close()
	w4.Close()
	logW.Close()
	pid := tp.read(t)
	if pid <= 0 {
		t.Fatalf("fork: %v", syscall.Errno(-pid))
	}
	tp.kids = append(tp.kids, pid)
	p := &proc{in: w3, out: r4, rd: bufio.NewReaderSize(r4, 1<<16), log: &syncBuffer{}, nextID: 1}
	go func() {
		defer logR.Close()
		_, _ = logR.WriteTo(p.log)
	}()
	t.Cleanup(func() { p.in.Close(); p.out.Close() })
	return p, pid
}

// waitForked reaps a forked worker, which is our child, and returns its exit status.
func waitForked(t *testing.T, pid int) int {
	t.Helper()
	p, _ := os.FindProcess(pid)
	state, err := p.Wait()
	if err != nil {
		t.Fatalf("waiting for the forked worker %d: %v", pid, err)
	}
	return state.ExitCode()
}

// procComm returns the name of process pid (its comm).
func procComm(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func parentPID(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	var state string
	var ppid int
	fmt.Sscan(string(stat[strings.LastIndexByte(string(stat), ')')+1:]), &state, &ppid)
	return ppid
}

// TestTemplate: the template forks workers that are our children, in process groups of their
// own, serve as started ones do (fds 3 and 4 close-on-exec, sessions of their own), and end
// with their exit status; it refuses a message without the four fds and exits at the end of
// its control socket.
func TestTemplate(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ini, _ := limits(t)
			tp := startTemplate(t, nil, m.argv(ini...)...)
			if comm := procComm(t, tp.pid); comm != "peregrine-tmpl" {
				t.Errorf("the template is named %q, want peregrine-tmpl", comm)
			}
			var sessions []string
			for range 2 {
				p, pid := tp.fork(t)
				if f := p.readFrame(t); f.Type != typeReady {
					t.Fatalf("first frame of the forked worker: type %d", f.Type)
				}
				if ppid := parentPID(t, pid); ppid != os.Getpid() {
					t.Errorf("forked worker %d: parent %d, want us (%d)", pid, ppid, os.Getpid())
				}
				if pgid, _ := syscall.Getpgid(pid); pgid != pid {
					t.Errorf("forked worker %d: process group %d", pid, pgid)
				}
				if comm := procComm(t, pid); comm != "peregrine-php" {
					t.Errorf("forked worker %d is named %q, want peregrine-php", pid, comm)
				}
				// Its command line is the template's without --template: ps tells them apart.
				cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
				// (without what the runtime adds when it starts itself again to load OPcache)
				args = slices.DeleteFunc(args, func(a string) bool { return a == "-dzend_extension=opcache.so" })
				if want := m.argv(ini...); err != nil || !slices.Equal(args, want) {
					t.Errorf("forked worker %d: command line %q, want %q (%v)", pid, args, want, err)
				}
				wantBody(t, p.do(t, caseRequest("hello", request{})), "Hello, world!")
				wantBody(t, p.do(t, caseRequest("cloexec", request{})), "checked")
				s := p.do(t, caseRequest("session", request{URI: "/session.php?user=alice"}))
				sessions = append(sessions, decode(t, s)["id"].(string))
				<-p.write(appendFrame(nil, typeStop, 0, nil))
				if code := waitForked(t, pid); code != 0 {
					t.Errorf("forked worker %d: exit status %d\n%s", pid, code, p.log)
				}
				tp.kids = tp.kids[:0]
			}
			if sessions[0] == sessions[1] {
				t.Errorf("two forked workers made the same session id %s", sessions[0])
			}
			if _, _, err := tp.ctl.WriteMsgUnix([]byte{'F'}, nil, nil); err != nil {
				t.Fatal(err)
			}
			if errno := tp.read(t); errno != -int(syscall.EINVAL) {
				t.Errorf("a message without fds: reply %d, want -EINVAL", errno)
			}
			tp.ctl.CloseWrite()
			if err := tp.cmd.Wait(); err != nil {
				t.Errorf("the template at the end of its socket: %v", err)
			}
		})
	}
}

// TestValgrindTemplate: a worker forked by a template under memcheck serves the mix of
// TestValgrind and stops cleanly, and so does the template at the end of its socket.
func TestValgrindTemplate(t *testing.T) {
	memoryTests(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			tp := startTemplate(t, []string{"USE_ZEND_ALLOC=0"}, memcheck(t, m)...)
			p, pid := tp.fork(t)
			if f := p.readFrame(t); f.Type != typeReady {
				t.Fatalf("first frame type %d, want READY", f.Type)
			}
			for i := range 200 {
				if a := p.do(t, mixed(t, i, dir)); a.Status == 0 {
					t.Fatalf("request %d: no status", i)
				}
			}
			<-p.write(appendFrame(nil, typeStop, 0, nil))
			if code := waitForked(t, pid); code != 0 {
				t.Errorf("the forked worker under valgrind: exit status %d (99: memcheck found errors):\n%s", code, p.log)
			}
			tp.kids = nil
			tp.ctl.CloseWrite()
			if err := tp.cmd.Wait(); err != nil {
				t.Errorf("the template under valgrind: %v (99: memcheck found errors)", err)
			}
		})
	}
}
