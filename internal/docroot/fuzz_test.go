package docroot

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolve checks properties of Resolve and ResolveWorker on any path: a file to serve or run
// is under the root and was named without a dot segment; a served file is never PHP source;
// URIs are clean.
func FuzzResolve(f *testing.F) {
	for _, p := range []string{"/", "/a.php/x", "/../a", "/sub/..", "/.env", "//a//b/", "/a%2f..", "/style.css", "/.well-known/x.txt", "/x.PHP", "/\x00"} {
		f.Add(p)
	}
	dir := tree(f)
	r, err := New(dir, Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		for _, got := range []Target{r.Resolve(p), r.ResolveWorker(p)} {
			if got.File != "" {
				if rel, err := filepath.Rel(dir, got.File); err != nil || strings.HasPrefix(rel, "..") {
					t.Fatalf("%q: %q is outside the root", p, got.File)
				}
				if rel := strings.TrimPrefix(got.File, dir); hasDotSegment(rel) {
					t.Fatalf("%q: %q has a dot segment", p, got.File)
				}
			}
			if got.Kind == Static && phpSource(got.File) {
				t.Fatalf("%q: PHP source served: %q", p, got.File)
			}
			if got.URI != "" && got.Kind != BadRequest {
				if c, ok := clean(got.URI); !ok || c != got.URI {
					t.Fatalf("%q: URI %q is not clean", p, got.URI)
				}
			}
		}
	})
}
