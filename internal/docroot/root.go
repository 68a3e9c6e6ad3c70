// Package docroot owns the document root: it routes a request path the way nginx + PHP-FPM do
// (Resolve for classic mode, ResolveWorker for worker mode), computes the CGI parameters PHP-FPM
// would see for a script (Params), and serves what the server answers itself: static files with
// validators, ranges, sendfile and precompressed siblings, directory redirects and the 400, 403,
// 404 and 405 answers (Serve), and any file PHP names with X-Sendfile or X-Accel-Redirect
// (ServeFile; ResolveFile applies the rules below to an X-Accel-Redirect path). It knows
// nothing of workers or of the protocol.
//
// The handler uses it in three calls:
//
//	t := root.Resolve(r.URL.Path) // root.ResolveWorker in worker mode
//	if !t.RunsPHP() {
//		root.Serve(w, r, t)
//		return
//	}
//	params := root.Params(t, serverName) // the REQUEST frame's server parameters
//
// # What is never served as a file
//
// A path with a segment that starts with a dot (/.env, /.git/config) answers 403 in classic
// mode, whether or not it exists, as the usual nginx rule location ~ /\.(?!well-known/)
// { deny all; } does: a .well-known/ segment is the one exception, so ACME challenges and
// security.txt work. In worker mode such a path goes to the worker. A file whose name ends in
// .php (in any case), .phtml, .phar, .phps or .php3 to .php8 is never sent as is: under the
// root it runs or answers 404.
//
// # Paths and symbolic links
//
// The path is the decoded URL path (r.URL.Path). It is normalized as nginx normalizes $uri:
// repeated slashes merge, "." segments go, ".." removes the segment before it, and a ".." that
// would climb above the root, or a NUL byte, answers 400. An encoded slash (%2F) is decoded
// before routing, as nginx does, so it cannot hide a ".." or a dot segment. Symbolic links under
// the root are followed wherever they lead, as nginx does by default (disable_symlinks off):
// only the owner of the tree can make one, and Debian's own packages rely on it (WordPress links
// wp-includes/js files to /usr/share/javascript). Nothing a client sends can name a file outside
// the root except through such a link.
package docroot

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Root is a document root. It is safe for concurrent use. It keeps the files it served open for
// a second (the open-file cache, files.go), and remembers which precompressed siblings exist
// for a second (siblingTTL): a file changed, replaced or deleted is served as it was for at
// most a second, a sibling added or removed is seen within a second, and other changes to the
// tree (a file added, a directory) are seen at once.
type Root struct {
	dir       string   // absolute, cleaned, without a trailing slash (except "/")
	index     string   // the front controller's URI, e.g. "/index.php"
	dirIndex  []string // file names tried in a directory, e.g. "index.php", "index.html"
	encodings []string // precompressed siblings looked for, in the server's order of preference

	siblingTTL time.Duration // how long a sibling lookup is trusted; 0 looks every time
	files      *fileCache    // the files served, open (files.go)

	mu       sync.Mutex
	siblings map[string]siblingEntry // by file path; guarded by mu; at most maxSiblingEntries
}

// Options configure a Root.
type Options struct {
	// Index is the front controller, a path under the root: the script that runs, in classic
	// mode, for a path that names no file. Its base name is also the first index file tried in a
	// directory, before index.html. Empty means index.php.
	Index string

	// Encodings lists the content codings whose precompressed siblings are served ("br" serves
	// app.js.br for app.js, "zstd" app.js.zst, "gzip" app.js.gz), in the server's order of
	// preference when the client accepts several equally. Unknown names are ignored; empty
	// serves no sibling.
	Encodings []string
}

// ErrNotDir is returned by New when the root is not a directory.
var ErrNotDir = errors.New("not a directory")

// New returns the document root at dir, which must be an existing directory; a relative dir is
// made absolute against the current directory.
func New(dir string, opts Options) (*Root, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s: %w", abs, ErrNotDir)
	}
	index := opts.Index
	if index == "" {
		index = "index.php"
	}
	index = path.Clean("/" + index)
	r := &Root{dir: abs, index: index, siblingTTL: time.Second, files: newFileCache(time.Second), siblings: map[string]siblingEntry{}}
	r.dirIndex = []string{path.Base(index)}
	if r.dirIndex[0] != "index.html" {
		r.dirIndex = append(r.dirIndex, "index.html")
	}
	for _, e := range opts.Encodings {
		if siblingExt[e] != "" {
			r.encodings = append(r.encodings, e)
		}
	}
	return r, nil
}

// Dir returns the root's absolute path, the DOCUMENT_ROOT PHP sees.
func (r *Root) Dir() string { return r.dir }

// file returns the file system path of uri, a normalized path from clean.
func (r *Root) file(uri string) string {
	if r.dir == "/" {
		return uri
	}
	return r.dir + uri
}

// stat returns the file information of uri, following symbolic links; nil when there is no such
// file or it cannot be read.
func (r *Root) stat(uri string) os.FileInfo {
	fi, err := os.Stat(r.file(uri))
	if err != nil {
		return nil
	}
	return fi
}

// isRegular reports whether uri names a regular file (after symbolic links): one the open-file
// cache trusts, or else by a stat.
func (r *Root) isRegular(uri string) bool {
	if r.files.fresh(r.file(uri)) {
		return true
	}
	fi := r.stat(uri)
	return fi != nil && fi.Mode().IsRegular()
}

// phpSource reports whether a file of this name holds PHP source, which is never sent as is.
func phpSource(name string) bool {
	ext := strings.ToLower(path.Ext(name))
	switch ext {
	case ".php", ".phtml", ".phar", ".phps":
		return true
	}
	return len(ext) == 5 && strings.HasPrefix(ext, ".php") && ext[4] >= '3' && ext[4] <= '8'
}
