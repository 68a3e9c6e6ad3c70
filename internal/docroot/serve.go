package docroot

import (
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/peregrinephp/peregrine/internal/compress"
)

// siblingExt maps a content coding to the extension of a file's precompressed sibling.
var siblingExt = map[string]string{"br": ".br", "zstd": ".zst", "gzip": ".gz"}

// Serve answers a target that does not run PHP (t.RunsPHP() is false):
//   - Static: the file, to GET and HEAD only (others get 405 with Allow: GET, HEAD), with
//     Content-Type by extension, Last-Modified, an ETag as nginx makes it ("mtime-size" in hex),
//     conditional requests (If-None-Match, If-Modified-Since, If-Match, If-Unmodified-Since), a
//     single or multiple Range, If-Range, and sendfile from the file to the socket when nothing
//     wraps w but a writer that passes io.ReaderFrom through. When the root looks for
//     precompressed siblings (Options.Encodings), the file's type is compressible
//     (compress.Compressible: not for images, fonts, video, archives, which saves three
//     stat calls) and app.js.br, .zst or .gz exists, the answer
//     carries Vary: Accept-Encoding, and the sibling the client accepts best is sent in place of
//     the file, with its Content-Encoding, the file's Content-Type and the sibling's own ETag and
//     Last-Modified;
//   - Redirect: 301 to t.URI with the request's query string, as nginx sends for a directory
//     named without its trailing slash;
//   - Forbidden, NotFound, BadRequest: 403, 404, 400 with a short text body.
//
// A target that runs PHP answers 500: it is the caller's mistake.
func (r *Root) Serve(w http.ResponseWriter, req *http.Request, t Target) {
	switch t.Kind {
	case Static:
		r.serveFile(w, req, t)
	case Redirect:
		u := url.URL{Path: t.URI, RawQuery: req.URL.RawQuery}
		http.Redirect(w, req, u.String(), http.StatusMovedPermanently)
	case Forbidden:
		http.Error(w, "403 forbidden", http.StatusForbidden)
	case NotFound:
		http.Error(w, "404 page not found", http.StatusNotFound)
	case BadRequest:
		http.Error(w, "400 bad request", http.StatusBadRequest)
	default:
		http.Error(w, "500 internal server error: "+t.Kind.String()+" target served as a file", http.StatusInternalServerError)
	}
}

// ServeFile sends the file at file, a file system path, as Serve sends a Static target (type,
// validators, conditional requests, ranges, sendfile, precompressed siblings), whatever the
// request's method, as nginx sends the file an X-Accel-Redirect names. It is for X-Sendfile and
// X-Accel-Redirect: the caller decides which files may be sent, since file is checked neither
// against the root nor against the dotfile and PHP source rules. A Content-Type already in w's
// header (PHP's, for a download) is kept, as nginx keeps the upstream's; other headers already
// set go out with the file. A file that does not exist, or is not a regular file, answers 404;
// one that cannot be read, 403. A nil Root (a server without a document root sending a file from
// http.sendfile_dirs) sends the file itself, without looking for precompressed siblings.
//
// allowSibling, when not nil, must approve a precompressed sibling's path (file + ".gz") before
// it is sent in place of file: X-Sendfile puts it through the same directory and link check
// as the file itself, so a sibling that links out of the allowed directories is never sent.
func (r *Root) ServeFile(w http.ResponseWriter, req *http.Request, file string, allowSibling func(path string) bool) {
	ctype := w.Header().Get("Content-Type")
	if ctype == "" {
		ctype = contentType(file)
	}
	r.sendFile(w, req, file, ctype, allowSibling)
}

func (r *Root) serveFile(w http.ResponseWriter, req *http.Request, t Target) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	r.sendFile(w, req, t.File, contentType(t.File), nil)
}

// sendFile sends file, or a precompressed sibling that allowSibling (nil: any) approves, as of
// type ctype.
func (r *Root) sendFile(w http.ResponseWriter, req *http.Request, file, ctype string, allowSibling func(string) bool) {
	h := w.Header()
	var f *os.File
	if r != nil && len(r.encodings) > 0 && compress.Compressible(ctype) {
		var have [3]string
		n := 0
		bits := r.siblingsOf(file)
		for i, coding := range r.encodings {
			if bits&(1<<i) != 0 && n < len(have) && (allowSibling == nil || allowSibling(file+siblingExt[coding])) {
				have[n] = coding
				n++
			}
		}
		if n > 0 {
			compress.AddVary(h, "Accept-Encoding")
			if coding := compress.Negotiate(req.Header.Get("Accept-Encoding"), have[:n]); coding != "" {
				if sf, err := os.Open(file + siblingExt[coding]); err == nil {
					f = sf
					h.Set("Content-Encoding", coding)
				}
			}
		}
	}
	if f == nil {
		var err error
		if f, err = os.Open(file); err != nil {
			fileError(w, err)
			return
		}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		h.Del("Content-Encoding")
		fileError(w, err)
		return
	}
	h.Set("Content-Type", ctype)
	h.Set("ETag", etag(fi))
	http.ServeContent(w, req, "", fi.ModTime(), f)
}

// maxSiblingEntries bounds the sibling cache; past it the cache starts again empty.
const maxSiblingEntries = 4096

// siblingEntry remembers which precompressed siblings of a file exist.
type siblingEntry struct {
	have uint8 // bit i set: the sibling for r.encodings[i] is a regular file
	at   time.Time
}

// siblingsOf returns which precompressed siblings of file exist, bit i for r.encodings[i]. A
// lookup costs a stat call per coding, mostly for siblings that do not exist, so it is
// remembered for r.siblingTTL.
func (r *Root) siblingsOf(file string) uint8 {
	now := time.Now()
	r.mu.Lock()
	e, ok := r.siblings[file]
	r.mu.Unlock()
	if ok && now.Sub(e.at) < r.siblingTTL {
		return e.have
	}
	var have uint8
	for i, coding := range r.encodings {
		if fi, err := os.Stat(file + siblingExt[coding]); err == nil && fi.Mode().IsRegular() {
			have |= 1 << i
		}
	}
	if r.siblingTTL > 0 {
		r.mu.Lock()
		if len(r.siblings) >= maxSiblingEntries {
			clear(r.siblings)
		}
		r.siblings[file] = siblingEntry{have, now}
		r.mu.Unlock()
	}
	return have
}

// etag returns nginx's entity tag for a file: its modification time in seconds and its size, in
// hexadecimal.
func etag(fi os.FileInfo) string {
	b := make([]byte, 0, 32)
	b = append(b, '"')
	b = strconv.AppendInt(b, fi.ModTime().Unix(), 16)
	b = append(b, '-')
	b = strconv.AppendInt(b, fi.Size(), 16)
	b = append(b, '"')
	return string(b)
}

// fileError answers a file that could not be opened or is not a regular file: 403 when
// permission is denied, as nginx answers, and 404 otherwise.
func fileError(w http.ResponseWriter, err error) {
	if errors.Is(err, fs.ErrPermission) {
		http.Error(w, "403 forbidden", http.StatusForbidden)
		return
	}
	http.Error(w, "404 page not found", http.StatusNotFound)
}
