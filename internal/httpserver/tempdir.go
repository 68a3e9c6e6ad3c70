package httpserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Uploads are written to temporary files while their request runs and removed once it is
// answered. A daemon that is SIGKILLed mid-upload cannot remove them, so each daemon keeps its
// files in a directory of its own named after its pid, and the next daemon to start removes the
// directories of daemons that are no longer running.

// uploadDirPrefix starts the name of every daemon's upload directory.
const uploadDirPrefix = "peregrine-uploads-"

// UploadDir creates this daemon's upload directory under parent (os.TempDir() when empty),
// parent/peregrine-uploads-PID, readable by this user only, after removing the directories left
// there by daemons that died without removing theirs. It returns the directory, to be passed as
// Options.TempDir, and how many stale directories it removed. Call RemoveUploadDir at exit.
func UploadDir(parent string) (dir string, swept int, err error) {
	if parent == "" {
		parent = os.TempDir()
	}
	swept = sweepUploadDirs(parent)
	dir = filepath.Join(parent, uploadDirPrefix+strconv.Itoa(os.Getpid()))
	if err := os.RemoveAll(dir); err != nil { // a previous process with the same pid
		return "", swept, fmt.Errorf("removing the stale upload directory %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", swept, fmt.Errorf("creating the upload directory: %w", err)
	}
	return dir, swept, nil
}

// RemoveUploadDir removes the directory UploadDir made, with any file left in it.
func RemoveUploadDir(dir string) error {
	if !strings.HasPrefix(filepath.Base(dir), uploadDirPrefix) {
		return fmt.Errorf("%s is not an upload directory", dir)
	}
	return os.RemoveAll(dir)
}

// sweepUploadDirs removes the upload directories under parent whose daemon is not running and
// that belong to this user, and returns how many it removed.
func sweepUploadDirs(parent string) int {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, uploadDirPrefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(name, uploadDirPrefix))
		if err != nil || pid <= 0 || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		path := filepath.Join(parent, name)
		if fi, err := os.Lstat(path); err != nil || !ownedByMe(fi) {
			continue
		}
		if os.RemoveAll(path) == nil {
			n++
		}
	}
	return n
}

// processAlive reports whether a process with this pid exists (kill with signal 0).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
