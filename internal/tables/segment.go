package tables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// EnvVar is the environment variable that gives workers and tables.init the segment's path.
const EnvVar = "PEREGRINE_TABLES"

const prefix = "peregrine-tables-"

// DefaultDir is where segments are created: /dev/shm, a tmpfs on Linux, or the temporary
// directory where there is none.
func DefaultDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// Segment is a created segment. Its methods may be called from any goroutine.
type Segment struct {
	path   string
	size   int64
	tables []tableLayout
	f      *os.File
}

// Create lays out specs in a new segment in dir named after pid (the daemon's), reserves its
// whole size (so that a full tmpfs fails here, not in a worker with SIGBUS) and writes the
// header. Every row is free. The caller removes it with Remove.
func Create(dir string, specs []Spec, pid int) (*Segment, error) {
	tls, size, err := plan(specs)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, prefix+strconv.Itoa(pid))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	fail := func(err error) (*Segment, error) {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		hint := ""
		if errors.Is(err, syscall.ENOSPC) {
			hint = fmt.Sprintf(" (df %s shows what is free; a container's /dev/shm is often 64 MiB: raise it, e.g. docker run --shm-size, or lower the tables' rows)", dir)
		}
		return fail(fmt.Errorf("tables: reserving %d bytes of shared memory in %s: %w%s", size, dir, err, hint))
	}
	if _, err := f.WriteAt(header(tls, size, pid), 0); err != nil {
		return fail(fmt.Errorf("tables: %w", err))
	}
	return &Segment{path: path, size: size, tables: tls, f: f}, nil
}

// Path is the segment's file, the value of EnvVar.
func (s *Segment) Path() string { return s.path }

// Size is the segment's size in bytes, the memory every table takes together.
func (s *Segment) Size() int64 { return s.size }

// Remove deletes the segment; processes that still map it keep their mapping until they exit.
func (s *Segment) Remove() error {
	s.f.Close()
	return os.Remove(s.path)
}

// Stat is one table's figures.
type Stat struct {
	Name     string `json:"name"`
	Rows     int64  `json:"rows"`
	Capacity int64  `json:"capacity"`
	Bytes    int64  `json:"bytes"`
	// RowBytes is the row's stride, without its share of the buckets.
	RowBytes int64 `json:"row_bytes"`
	// ReadRetries counts the lock-free reads (get, exists, iteration, where) that a concurrent
	// write spoiled and that started again, since the server started: contention, in one figure.
	ReadRetries int64 `json:"read_retries"`
}

// Stats reads each table's rows used, which the workers change as they go.
func (s *Segment) Stats() ([]Stat, error) {
	out := make([]Stat, len(s.tables))
	var b [stateHeader]byte
	le := binary.LittleEndian
	for i, t := range s.tables {
		if _, err := s.f.ReadAt(b[:], t.state); err != nil {
			return nil, fmt.Errorf("tables: reading %s: %w", t.spec.Name, err)
		}
		out[i] = Stat{Name: t.spec.Name, Rows: int64(le.Uint32(b[stateCount:])), Capacity: int64(t.spec.Capacity),
			Bytes: t.Bytes(), RowBytes: int64(t.stride), ReadRetries: int64(le.Uint64(b[stateReadRetries:]))}
	}
	return out, nil
}

// Sweep removes the segments in dir whose daemon is no longer running (one killed with SIGKILL
// could not remove its own), and returns how many it removed.
func Sweep(dir string) (int, error) {
	names, err := filepath.Glob(filepath.Join(dir, prefix+"*"))
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, name := range names {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(name), prefix))
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
