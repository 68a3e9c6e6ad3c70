package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/httpserver"
)

// logFile is a log file opened for appending that SIGHUP reopens (log.access_file): after
// logrotate has moved it, the next records go to a new file of the same name.
type logFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func openLogFile(path string) (*logFile, error) {
	l := &logFile{path: path}
	if err := l.reopen(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

// reopen opens the file again by name; on failure the old file stays in use.
func (l *logFile) reopen() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("log.access_file: %w", err)
	}
	l.mu.Lock()
	old := l.f
	l.f = f
	l.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return nil
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// accessLogs keeps the access log where log.access and log.access_file say, at start and
// after a reload: the server's log, a file of JSON lines, or nowhere.
type accessLogs struct {
	log  *slog.Logger // the server's log: the access log's place without a file
	out  *httpserver.AccessLog
	file *logFile // nil without log.access_file
}

func newAccessLogs(log *slog.Logger) *accessLogs {
	return &accessLogs{log: log, out: httpserver.NewAccessLog(nil)}
}

// apply points the access log where c says; on error nothing changes.
func (a *accessLogs) apply(c config.Log) error {
	var next *slog.Logger
	file := a.file
	switch {
	case c.AccessFile != "":
		if file == nil || file.path != c.AccessFile {
			f, err := openLogFile(c.AccessFile)
			if err != nil {
				return err
			}
			file = f
		}
		next = slog.New(slog.NewJSONHandler(file, nil))
	case c.Access:
		next, file = a.log, nil
	default:
		file = nil
	}
	a.out.Set(next)
	if a.file != nil && a.file != file {
		_ = a.file.Close() // a request still logging to it gets an error, not a crash
	}
	a.file = file
	return nil
}

// reopen reopens the access file by name (SIGHUP: logrotate moved it).
func (a *accessLogs) reopen() error {
	if a.file == nil {
		return nil
	}
	return a.file.reopen()
}

func (a *accessLogs) close() {
	a.out.Set(nil)
	if a.file != nil {
		_ = a.file.Close()
	}
}
