package docroot

import (
	"strings"
)

// Kind says what the server does with a request path.
type Kind uint8

// The kinds of Target. Script and Worker run PHP; the others are answered by Serve.
const (
	// NotFound answers 404.
	NotFound Kind = iota
	// Static serves the file Target.File.
	Static
	// Script runs the PHP script Target.File (classic mode).
	Script
	// Worker hands the request to the worker script (worker mode).
	Worker
	// Redirect answers 301 to Target.URI, a directory's path with its trailing slash.
	Redirect
	// Forbidden answers 403: a dot segment, or a directory without an index file.
	Forbidden
	// BadRequest answers 400: a NUL byte, or a ".." that climbs above the root.
	BadRequest
)

var kindNames = [...]string{"not found", "static", "script", "worker", "redirect", "forbidden", "bad request"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Target is where a request path leads. Resolve and ResolveWorker return it; it holds no open
// file and may be kept.
type Target struct {
	Kind Kind

	// File is the file system path of the file to serve (Static) or of the script to run
	// (Script, SCRIPT_FILENAME); empty for the other kinds.
	File string

	// URI is the normalized path that was routed, nginx's $uri once try_files and index are
	// done with it, DOCUMENT_URI for a script: the script's name ("/a.php" for "/a.php/extra",
	// "/blog/index.php" for "/blog/", "/index.php" for a path the front controller runs). For
	// Redirect it is where to: the directory's path with its slash.
	URI string

	// ScriptName is the script's path under the root (Script; SCRIPT_NAME), e.g. "/a.php".
	ScriptName string

	// PathInfo is what follows the script's name in the path (Script; PATH_INFO): "/extra" for
	// "/a.php/extra", empty for "/a.php".
	PathInfo string
}

// RunsPHP reports whether the target goes to PHP (Script or Worker); every other kind is answered
// by Serve.
func (t Target) RunsPHP() bool { return t.Kind == Script || t.Kind == Worker }

// Resolve routes urlPath, the decoded path of a request (r.URL.Path), as nginx does in classic
// mode with PHP-FPM behind it, configured as
//
//	index index.php index.html;
//	location ~ /\.(?!well-known/) { deny all; }
//	location / { try_files $uri $uri/ /index.php?$query_string; }
//	location ~ [^/]\.php(/|$) {
//		include snippets/fastcgi-php.conf;   # Debian's: splits ^(.+?\.php)(/.*)$,
//		fastcgi_pass unix:/run/php/php8.2-fpm.sock;  # try_files $fastcgi_script_name =404
//	}
//
// which gives, in order:
//   - a NUL byte or a ".." above the root: BadRequest; a segment starting with a dot, except
//     .well-known with something after it (/.well-known/acme-challenge/x): Forbidden;
//   - a path with a segment ending in ".php": the part up to the first such segment is the
//     script, the rest PATH_INFO ("/a.php/extra" runs /a.php with PATH_INFO "/extra"); if that
//     script is not a regular file, NotFound (nginx never falls back to the front controller
//     here);
//   - an existing regular file: Static, unless its name is PHP source (a.PHP, a.phtml), which is
//     NotFound: nginx would send such a file as is, Peregrine never does;
//   - a directory: without its trailing slash, Redirect to it with one; with it, its index file
//     (the front controller's base name, then index.html) runs or is served (NotFound if it is
//     not a regular file); without an index file, Forbidden (nginx's "directory index of ...
//     is forbidden");
//   - anything else runs the front controller (Options.Index) with the request's query string;
//     NotFound if the front controller does not exist.
//
// Resolve only reads file metadata; it is what the tests compare with real nginx answers.
func (r *Root) Resolve(urlPath string) Target {
	uri, t, ok := r.check(urlPath)
	if !ok {
		return t
	}
	// location ~ [^/]\.php(/|$), split as Debian's snippets/fastcgi-php.conf splits.
	if i := phpSplit(uri); i > 0 {
		name := uri[:i]
		if !r.isRegular(name) {
			return Target{Kind: NotFound, URI: uri}
		}
		return r.script(name, uri[i:])
	}
	// location / { try_files $uri $uri/ ... }
	if !strings.HasSuffix(uri, "/") && r.files.fresh(r.file(uri)) { // a file served a moment ago
		if phpSource(uri) {
			return Target{Kind: NotFound, URI: uri}
		}
		return Target{Kind: Static, File: r.file(uri), URI: uri}
	}
	fi := r.stat(uri)
	switch {
	case fi != nil && fi.Mode().IsRegular() && !strings.HasSuffix(uri, "/"):
		if phpSource(uri) {
			return Target{Kind: NotFound, URI: uri}
		}
		return Target{Kind: Static, File: r.file(uri), URI: uri}
	case fi != nil && fi.IsDir():
		if !strings.HasSuffix(uri, "/") {
			return Target{Kind: Redirect, URI: uri + "/"}
		}
		// index index.php index.html: the first that exists, whatever its type, is where
		// nginx redirects internally (a directory index.php then answers 404).
		for _, name := range r.dirIndex {
			index := uri + name
			ifi := r.stat(index)
			switch {
			case ifi == nil:
				continue
			case phpSplit(index) > 0 && ifi.Mode().IsRegular():
				return r.script(index, "")
			case ifi.Mode().IsRegular() && !phpSource(index):
				return Target{Kind: Static, File: r.file(index), URI: index}
			}
			return Target{Kind: NotFound, URI: index}
		}
		return Target{Kind: Forbidden, URI: uri}
	}
	// ... /index.php?$query_string;
	if !r.isRegular(r.index) {
		return Target{Kind: NotFound, URI: r.index}
	}
	return r.script(r.index, "")
}

// ResolveWorker routes urlPath in worker mode: an existing regular file that is not PHP source,
// under no dot segment, is Static; a NUL byte or a ".." above the root is BadRequest; everything
// else, directories included, goes to the worker (Worker), which routes it as the application
// does.
func (r *Root) ResolveWorker(urlPath string) Target {
	uri, t, ok := r.check(urlPath)
	if !ok {
		if t.Kind == Forbidden { // dot segments are the application's business
			return Target{Kind: Worker, URI: uri}
		}
		return t
	}
	if !strings.HasSuffix(uri, "/") && !phpSource(uri) && r.isRegular(uri) {
		return Target{Kind: Static, File: r.file(uri), URI: uri}
	}
	return Target{Kind: Worker, URI: uri}
}

// ResolveFile routes urlPath, the decoded path PHP named with X-Accel-Redirect, as nginx routes
// that internal redirect through the locations Resolve describes, for a file only: a NUL byte or
// a ".." above the root is BadRequest; a dot segment (other than .well-known/...) is Forbidden,
// as nginx's deny answers 403; a path that would run PHP (a segment ending in ".php") or names
// PHP source is NotFound, since Peregrine sends neither a script's source nor runs a second
// script inside an answer (nginx would run it; docs/compatibility.md); anything else is Static,
// File its path under the root, whether or not it exists (ServeFile answers 404 for a file
// that does not).
func (r *Root) ResolveFile(urlPath string) Target {
	uri, t, ok := r.check(urlPath)
	if !ok {
		return t
	}
	if phpSplit(uri) > 0 || phpSource(uri) {
		return Target{Kind: NotFound, URI: uri}
	}
	return Target{Kind: Static, File: r.file(uri), URI: uri}
}

// check normalizes urlPath and refuses what no mode routes. ok is false with the target to
// answer when the path is bad or has a dot segment.
func (r *Root) check(urlPath string) (uri string, t Target, ok bool) {
	uri, valid := clean(urlPath)
	if !valid {
		return "", Target{Kind: BadRequest}, false
	}
	if hasDotSegment(uri) {
		return uri, Target{Kind: Forbidden, URI: uri}, false
	}
	return uri, Target{}, true
}

func (r *Root) script(name, pathInfo string) Target {
	return Target{Kind: Script, File: r.file(name), URI: name, ScriptName: name, PathInfo: pathInfo}
}

// clean normalizes a decoded URL path as nginx normalizes $uri: it starts with a slash, repeated
// slashes merge, "." segments go and ".." removes the segment before it, and a trailing slash is
// kept (a trailing "/." or "/.." leaves one). valid is false for a NUL byte, or a ".." that would
// climb above the root, where nginx answers 400.
func clean(p string) (uri string, valid bool) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", false
	}
	if p == "" || p == "/" {
		return "/", true
	}
	if !strings.Contains(p, "//") && !strings.Contains(p, "/.") && p[0] == '/' {
		return p, true // the common case, already clean
	}
	b := make([]byte, 0, len(p)+1)
	b = append(b, '/')
	for i := 0; i < len(p); {
		for i < len(p) && p[i] == '/' {
			i++
		}
		j := i
		for j < len(p) && p[j] != '/' {
			j++
		}
		seg := p[i:j]
		last := j >= len(p) // no slash after this segment
		switch seg {
		case "", ".":
		case "..":
			if len(b) == 1 {
				return "", false
			}
			b = b[:len(b)-1] // the slash ending the previous segment
			k := len(b)
			for b[k-1] != '/' {
				k--
			}
			b = b[:k]
		default:
			b = append(b, seg...)
			if !last {
				b = append(b, '/')
			}
		}
		i = j
	}
	return string(b), true
}

// hasDotSegment reports whether a segment of uri starts with a dot, other than a
// ".well-known" followed by a slash: the paths nginx's location ~ /\.(?!well-known/) denies.
func hasDotSegment(uri string) bool {
	for i := 0; ; {
		k := strings.Index(uri[i:], "/.")
		if k < 0 {
			return false
		}
		i += k + 2
		if !strings.HasPrefix(uri[i:], "well-known/") {
			return true
		}
	}
}

// phpSplit returns the end of the script's name in uri: the index just past the first ".php"
// that ends a segment and has a character before it in that segment (nginx's location
// ~ [^/]\.php(/|$) with Debian's fastcgi_split_path_info ^(.+?\.php)(/.*)$); 0 if none.
func phpSplit(uri string) int {
	for i := 0; ; {
		k := strings.Index(uri[i:], ".php")
		if k < 0 {
			return 0
		}
		end := i + k + 4
		if i+k > 0 && uri[i+k-1] != '/' && (end == len(uri) || uri[end] == '/') {
			return end
		}
		i = end
	}
}
