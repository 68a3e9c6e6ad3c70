package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

func TestPHPArgv(t *testing.T) {
	ini := []string{"-d", "opcache.enable_cli=1"}
	tests := []struct {
		argv, want []string
	}{
		{[]string{"php", "w.php"}, []string{"php", "-d", "opcache.enable_cli=1", "w.php"}},
		{[]string{"/usr/bin/php8.2", "w.php", "x"}, []string{"/usr/bin/php8.2", "-d", "opcache.enable_cli=1", "w.php", "x"}},
		{[]string{"php-cli", "w.php"}, []string{"php-cli", "-d", "opcache.enable_cli=1", "w.php"}},
		{[]string{"./run.sh", "w.php"}, []string{"./run.sh", "w.php"}},
		{[]string{"phpunit"}, []string{"phpunit"}},
	}
	for _, tt := range tests {
		if got := PHPArgv(tt.argv, ini); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("PHPArgv(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

func TestLookPathSaysHowToInstallPHP(t *testing.T) {
	_, err := LookPath("/nonexistent/php8.9")
	if err == nil || !strings.Contains(err.Error(), "apt-get install php8.2-cli") {
		t.Fatalf("err = %v", err)
	}
}

// start boots testdata/workers/app.php, the fixture the integration tests use too.
func start(t *testing.T, script string) *Worker {
	t.Helper()
	path, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", script))
	w, err := Start(context.Background(), Options{
		Argv: []string{"php", path}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=1"), BootTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	return w
}

func request(t *testing.T, path string) []byte {
	t.Helper()
	b, err := protocol.AppendRequest(nil, 0, &protocol.Request{Method: "GET", URI: path, Path: path, Protocol: "HTTP/1.1"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExecBatchInOrder(t *testing.T) {
	w := start(t, "app.php")
	if w.PHPVersion() == "" {
		t.Fatal("no PHP version from READY")
	}
	frames := [][]byte{request(t, "/pid"), request(t, "/status?code=404"), request(t, "/pid")}
	var statuses []int
	n, _, err := w.Exec(frames, time.Minute, func(i int, payload []byte) {
		r, err := protocol.DecodeResponse(payload)
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, r.Status)
	})
	if err != nil || n != 3 || !reflect.DeepEqual(statuses, []int{200, 404, 200}) {
		t.Fatalf("answered %d, err %v, statuses %v", n, err, statuses)
	}
}

func TestExecFailures(t *testing.T) {
	tests := []struct {
		path    string
		want    error
		message string
	}{
		{"/crash", ErrExited, "exit code 3"},
		{"/garbage", ErrProtocol, "this is not"},
		{"/hang", ErrExecTimeout, "exec_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			w := start(t, "app.php")
			frames := [][]byte{request(t, "/pid"), request(t, tt.path), request(t, "/pid")}
			n, started, err := w.Exec(frames, 300*time.Millisecond, func(int, []byte) {})
			if !errors.Is(err, tt.want) || n != 1 || !started || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("answered %d started %v err %v", n, started, err)
			}
			select {
			case <-w.Exited():
			case <-time.After(5 * time.Second):
				t.Fatal("the failed worker is still running")
			}
		})
	}
}

func TestBootErrorCarriesPHPOutput(t *testing.T) {
	path, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "boot-exit.php"))
	_, err := Start(context.Background(), Options{Argv: []string{"php", path}, Env: os.Environ(), BootTimeout: 30 * time.Second})
	if !errors.Is(err, ErrBoot) || !strings.Contains(err.Error(), "database unreachable") || !strings.Contains(err.Error(), "exit code 1") {
		t.Fatalf("err = %v", err)
	}
}

func TestBootTimeout(t *testing.T) {
	_, err := Start(context.Background(), Options{Argv: []string{"php", "-r", "sleep(30);"}, Env: os.Environ(), BootTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrBoot) || !strings.Contains(err.Error(), "boot_timeout") {
		t.Fatalf("err = %v", err)
	}
}

func TestKilledBySIGKILL(t *testing.T) {
	crashed := start(t, "app.php")
	if crashed.KilledBySIGKILL() {
		t.Fatal("a running worker reported as killed")
	}
	_, _, _ = crashed.Exec([][]byte{request(t, "/crash")}, time.Minute, func(int, []byte) {})
	<-crashed.Exited()
	if crashed.KilledBySIGKILL() {
		t.Errorf("a worker that exited with code 3 reported as killed: %v", crashed.ExitError())
	}
	killed := start(t, "app.php")
	if err := syscall.Kill(killed.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-killed.Exited()
	if !killed.KilledBySIGKILL() {
		t.Errorf("a worker killed with SIGKILL not reported as such: %v", killed.ExitError())
	}
}
