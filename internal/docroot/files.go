package docroot

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// fileCache is the open-file cache, nginx's open_file_cache made safe by a short validity: it
// keeps, per file served, open descriptors and what the answer needs from the file's metadata
// (size, modification time, the ETag and Last-Modified values), so that serving a file it knows
// costs no stat, open, fstat or close.
//
// Freshness: an entry is trusted for ttl after it was last compared with its path (a stat of
// the path, whose device, inode, size, modification and change times must be the entry's). The
// first use after that compares again: a file replaced, changed, deleted or made unreadable is
// dropped and opened anew. A file is therefore served as it was at most ttl after it changed.
// Opening one more descriptor for an entry (all of its descriptors busy) compares too, so a
// change seen that way is taken at once.
//
// Contents: a small file's bytes (at most smallFile) are kept with its entry, up to maxContent
// bytes in all, read once when the entry is made: its answer then leaves in one sendmsg with the
// head, where a sendfile would need a second system call. They are dropped with the entry.
//
// Descriptors: each busy descriptor belongs to one request (sendfile moves the file's offset, so
// a descriptor is never shared by two answers); idle ones wait in their entry, at most
// maxIdlePerFile per file and maxIdle in all, and are all closed when the process runs out of
// descriptors. Entries past their ttl are dropped by a sweep that
// runs every ttl while the cache holds entries, closing their idle descriptors (busy ones close
// when their request ends): an idle server holds no descriptor two ttl after its last answer,
// and a deleted file's space is freed as soon.
//
//	absent --acquire--> fresh --ttl--> expired --use: same file--> fresh
//	                                          \--use: changed, or sweep--> dropped (closed)
type fileCache struct {
	ttl time.Duration // 0: every use compares with the path, and nothing stays open

	maxIdle int // idle descriptors kept in all: maxIdle, less under a low RLIMIT_NOFILE

	mu       sync.Mutex
	entries  map[string]*cachedFile // by path; guarded by mu; at most maxFileEntries
	idle     int                    // idle descriptors in all entries; guarded by mu
	content  int                    // bytes of file contents held by the entries; guarded by mu
	sweeping bool                   // a sweep is scheduled; guarded by mu
}

const (
	maxFileEntries = 1024
	maxIdlePerFile = 32
	maxIdle        = 256 // in all, and at most a sixteenth of the descriptors the process may open

	smallFile  = 32 << 10 // the largest file whose contents an entry keeps
	maxContent = 4 << 20  // file contents kept in all
)

// cachedFile is one file the cache knows. Its fields but idle, checked and dropped are fixed
// once it is made.
type cachedFile struct {
	path    string
	id      fileID
	size    int64
	modTime time.Time
	// Header values, made once: the answers' header maps share them (each of length and
	// capacity 1, so that an Add copies; nothing may change an element in place).
	etag         []string // nginx's "mtime-size"
	lastModified []string // nil for a zero or epoch time, which net/http does not send
	length       []string // size in decimal, the Content-Length
	// content is the file's bytes for a small file (see fileCache), else nil. It is the file
	// as id describes it: read, then checked against a second fstat.
	content []byte

	checked time.Time  // last compared with the path; guarded by the cache's mu
	idle    []*os.File // open on the file, offsets anywhere; guarded by mu
	dropped bool       // out of the cache: descriptors close when released; guarded by mu
}

// fileID is what tells one state of a file from another.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func idOf(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, true //nolint:unconvert // Dev is uint32 on some platforms
}

// acceptRanges is the Accept-Ranges header's value, shared as the entries' values are.
var acceptRanges = []string{"bytes"}

// errNotRegular is returned by acquire for a path that is not a regular file.
var errNotRegular = errors.New("not a regular file")

func newFileCache(ttl time.Duration) *fileCache {
	c := &fileCache{ttl: ttl, maxIdle: maxIdle, entries: map[string]*cachedFile{}}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur/16 < maxIdle {
		c.maxIdle = int(rl.Cur / 16)
	}
	return c
}

// fresh reports whether path is a regular file that the cache knows and trusts now: routing
// then needs no stat.
func (c *fileCache) fresh(path string) bool {
	now := time.Now()
	c.mu.Lock()
	e := c.entries[path]
	ok := e != nil && now.Sub(e.checked) < c.ttl
	c.mu.Unlock()
	return ok
}

// acquire returns an open handle on the regular file at path, from the cache when it holds a
// fresh entry. The error is os.Open's, or errNotRegular. The caller must release the handle.
func (c *fileCache) acquire(path string) (*fileHandle, error) {
	now := time.Now()
	c.mu.Lock()
	e := c.entries[path]
	if e != nil && now.Sub(e.checked) < c.ttl {
		f := c.takeIdle(e)
		c.mu.Unlock()
		if f != nil {
			return &fileHandle{f: f, e: e}, nil
		}
		return c.open(path, e, now)
	}
	c.mu.Unlock()
	if e != nil {
		// Expired: the same file still there is trusted again without opening it.
		if fi, err := os.Stat(path); err == nil {
			if id, ok := idOf(fi); ok && id == e.id {
				c.mu.Lock()
				var f *os.File
				if !e.dropped {
					e.checked = now
					f = c.takeIdle(e)
				}
				c.mu.Unlock()
				if f != nil {
					return &fileHandle{f: f, e: e}, nil
				}
			}
		}
	}
	return c.open(path, e, now)
}

// takeIdle returns one of e's idle descriptors, nil if it has none. Its offset is anywhere: the
// handle made of it seeks before reading. c.mu must be held.
func (c *fileCache) takeIdle(e *cachedFile) *os.File {
	n := len(e.idle)
	if n == 0 {
		return nil
	}
	f := e.idle[n-1]
	e.idle = e.idle[:n-1]
	c.idle--
	return f
}

// open opens path for a new handle. known is the entry the cache holds for path, if any: it is
// kept when the opened file is the same, replaced otherwise.
func (c *fileCache) open(path string, known *cachedFile, now time.Time) (*fileHandle, error) {
	f, fi, err := openRegular(path)
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		c.closeIdle() // out of descriptors: the idle ones go first
		f, fi, err = openRegular(path)
	}
	if err != nil {
		c.forget(path, known)
		return nil, err
	}
	id, ok := idOf(fi)
	if !ok || c.ttl <= 0 {
		return &fileHandle{f: f, e: newCachedFile(path, fi, id, now), kernel: true, temp: true}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.entries[path]; cur != nil && !cur.dropped && cur.id == id {
		return &fileHandle{f: f, e: cur, kernel: true}, nil
	}
	e := newCachedFile(path, fi, id, now)
	if e.size > 0 && e.size <= smallFile && c.content+int(e.size) <= maxContent {
		c.mu.Unlock()
		content := readWhole(f, e.size, id)
		c.mu.Lock()
		if cur := c.entries[path]; cur != nil && !cur.dropped && cur.id == id {
			return &fileHandle{f: f, e: cur, kernel: true}, nil // made meanwhile
		}
		if content != nil && c.content+len(content) <= maxContent {
			e.content = content
			c.content += len(content)
		}
	}
	if cur := c.entries[path]; cur != nil {
		c.drop(cur)
	} else if len(c.entries) >= maxFileEntries {
		for _, old := range c.entries {
			c.drop(old)
			break
		}
	}
	c.entries[path] = e
	if !c.sweeping {
		c.sweeping = true
		time.AfterFunc(c.ttl, c.sweep)
	}
	return &fileHandle{f: f, e: e, kernel: true}, nil
}

func newCachedFile(path string, fi os.FileInfo, id fileID, now time.Time) *cachedFile {
	e := &cachedFile{path: path, id: id, size: fi.Size(), modTime: fi.ModTime(), checked: now}
	e.etag = []string{etag(fi)}
	e.length = []string{strconv.FormatInt(e.size, 10)}
	if mt := e.modTime; !mt.IsZero() && !mt.Equal(time.Unix(0, 0)) {
		e.lastModified = []string{mt.UTC().Format(http.TimeFormat)}
	}
	return e
}

// readWhole returns the size bytes of f, nil when it cannot read them all or f is no longer the
// file id describes (written to meanwhile). It reads from offset 0, leaving f's offset alone.
func readWhole(f *os.File, size int64, id fileID) []byte {
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); n != len(b) || err != nil && err != io.EOF {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	if now, ok := idOf(fi); !ok || now != id {
		return nil
	}
	return b
}

// forget drops the entry for path when it is still e: the path no longer opens as that file.
func (c *fileCache) forget(path string, e *cachedFile) {
	if e == nil {
		return
	}
	c.mu.Lock()
	if c.entries[path] == e {
		c.drop(e)
	}
	c.mu.Unlock()
}

// drop takes e out of the cache and closes its idle descriptors. c.mu must be held.
func (c *fileCache) drop(e *cachedFile) {
	if c.entries[e.path] == e {
		delete(c.entries, e.path)
	}
	e.dropped = true
	c.content -= len(e.content) // answers under way keep theirs
	for _, f := range e.idle {
		f.Close()
	}
	c.idle -= len(e.idle)
	e.idle = nil
}

// closeIdle closes every idle descriptor; the entries stay, and open more as they need.
func (c *fileCache) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		for _, f := range e.idle {
			f.Close()
		}
		c.idle -= len(e.idle)
		e.idle = nil
	}
}

// release ends a handle's use: its descriptor waits in its entry for the next request, or is
// closed when the entry is dropped or enough wait already. h is not temp.
func (c *fileCache) release(h *fileHandle) {
	c.mu.Lock()
	e := h.e
	if e.dropped || len(e.idle) >= maxIdlePerFile || c.idle >= c.maxIdle {
		c.mu.Unlock()
		h.f.Close()
		return
	}
	e.idle = append(e.idle, h.f)
	c.idle++
	c.mu.Unlock()
}

// sweep drops the entries past their ttl, and runs again in ttl while entries are left.
func (c *fileCache) sweep() {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if now.Sub(e.checked) >= c.ttl {
			c.drop(e)
		}
	}
	if len(c.entries) == 0 {
		c.sweeping = false
		return
	}
	time.AfterFunc(c.ttl, c.sweep)
}

// fileHandle is one request's use of an open file: the io.ReadSeeker that http.ServeContent
// reads, which knows the file's size without asking the kernel and seeks only when it must. It
// implements syscall.Conn, so that net's sendfile still sees the file under it.
type fileHandle struct {
	f *os.File
	e *cachedFile

	// pos is the offset the reader is at. When kernel is set the file's own offset is the
	// reader's (a Read or a sendfile moved it) and pos is not used.
	pos    int64
	kernel bool
	temp   bool // not the cache's: closed on release
}

var (
	_ io.ReadSeeker = (*fileHandle)(nil)
	_ syscall.Conn  = (*fileHandle)(nil)
)

// sync sets the file's offset to pos when the kernel's is not the reader's.
func (h *fileHandle) sync() error {
	if h.kernel {
		return nil
	}
	if _, err := h.f.Seek(h.pos, io.SeekStart); err != nil {
		return err
	}
	h.kernel = true
	return nil
}

func (h *fileHandle) Read(p []byte) (int, error) {
	if err := h.sync(); err != nil {
		return 0, err
	}
	return h.f.Read(p)
}

// Seek moves the reader without a system call: the size is the entry's.
func (h *fileHandle) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		if h.kernel {
			return h.f.Seek(offset, io.SeekCurrent)
		}
		offset += h.pos
	case io.SeekEnd:
		offset += h.e.size
	default:
		return 0, errors.New("docroot: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("docroot: negative position")
	}
	h.pos, h.kernel = offset, false
	return offset, nil
}

// SyscallConn returns the file's, positioned at the reader's offset: sendfile sends from there.
func (h *fileHandle) SyscallConn() (syscall.RawConn, error) {
	if err := h.sync(); err != nil {
		return nil, err
	}
	return h.f.SyscallConn()
}
