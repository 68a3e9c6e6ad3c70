package docroot

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
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
	r.sendFile(w, req, file, ctype, allowSibling, false)
}

func (r *Root) serveFile(w http.ResponseWriter, req *http.Request, t Target) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	r.sendFile(w, req, t.File, contentType(t.File), nil, true)
}

// sendFile sends file, or a precompressed sibling that allowSibling (nil: any) approves, as of
// type ctype. cached takes the files from the open-file cache (Static targets); ServeFile's
// files are opened for the request alone, since its caller checks their path each time.
func (r *Root) sendFile(w http.ResponseWriter, req *http.Request, file, ctype string, allowSibling func(string) bool, cached bool) {
	h := w.Header()
	var fh *fileHandle
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
				if sf, err := r.open(file+siblingExt[coding], cached); err == nil {
					fh = sf
					h.Set("Content-Encoding", coding)
				}
			}
		}
	}
	if fh == nil {
		var err error
		if fh, err = r.open(file, cached); err != nil {
			fileError(w, err)
			return
		}
	}
	defer r.release(fh)
	e := fh.e
	h["Content-Type"] = []string{ctype}
	h["Etag"] = e.etag
	if conditional(req) {
		if zeroSuffix(req) {
			// net/http answers an empty 206 to bytes=-0; the last zero bytes of a file are
			// no range at all (RFC 9110 14.1.1), and nginx answers 416.
			h["Content-Range"] = []string{"bytes */" + strconv.FormatInt(e.size, 10)}
			h.Del("Etag")
			http.Error(w, "416 Range Not Satisfiable", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		if strings.IndexByte(req.Header.Get("Range"), ',') >= 0 {
			// Several ranges: net/http reads them in a goroutine that may outlive this call,
			// so the descriptor never goes back to the cache.
			fh.temp = true
		}
		http.ServeContent(w, req, "", e.modTime, fh)
		return
	}
	// What http.ServeContent answers to a request without validators or Range, with the
	// header values made once per file.
	if e.lastModified != nil {
		h["Last-Modified"] = e.lastModified
	}
	h["Accept-Ranges"] = acceptRanges
	if _, coded := h["Content-Encoding"]; !coded {
		h["Content-Length"] = e.length
	}
	w.WriteHeader(http.StatusOK)
	if req.Method != http.MethodHead {
		if e.content != nil {
			_, _ = w.Write(e.content) // with the head in one sendmsg (http1's response.send)
			return
		}
		// A section, not fh: http1 sends it by sendfile from its offset, without the lseek
		// that fh's file offset would need (http1/sendfile.go); anything else reads it by pread.
		_, _ = io.Copy(w, io.NewSectionReader(fh.f, 0, e.size))
	}
}

// zeroSuffix reports whether req asks, with no If-Range, for byte ranges that are all a
// suffix of zero bytes (bytes=-0).
func zeroSuffix(req *http.Request) bool {
	specs, ok := strings.CutPrefix(req.Header.Get("Range"), "bytes=")
	if !ok || req.Header.Get("If-Range") != "" {
		return false
	}
	for spec := range strings.SplitSeq(specs, ",") {
		spec = strings.TrimSpace(spec)
		if len(spec) < 2 || spec[0] != '-' || strings.Trim(spec[1:], "0") != "" {
			return false
		}
	}
	return true
}

// conditional reports whether req carries a header that http.ServeContent answers: a
// validator or a Range.
func conditional(req *http.Request) bool {
	h := req.Header
	return h.Get("If-None-Match") != "" || h.Get("If-Modified-Since") != "" || h.Get("Range") != "" ||
		h.Get("If-Match") != "" || h.Get("If-Unmodified-Since") != ""
}

// open returns a handle on the regular file at file: from the open-file cache when cached,
// else one of its own that release closes. A nil Root opens files of their own.
func (r *Root) open(file string, cached bool) (*fileHandle, error) {
	if cached && r != nil {
		return r.files.acquire(file)
	}
	f, fi, err := openRegular(file)
	if err != nil {
		return nil, err
	}
	id, _ := idOf(fi)
	return &fileHandle{f: f, e: newCachedFile(file, fi, id, time.Time{}), kernel: true, temp: true}, nil
}

// release ends the use of a handle from open.
func (r *Root) release(fh *fileHandle) {
	if fh.temp {
		fh.f.Close()
		return
	}
	r.files.release(fh)
}

// openRegular opens the regular file at path; the error is os.Open's, f.Stat's, or
// errNotRegular.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errNotRegular
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
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
