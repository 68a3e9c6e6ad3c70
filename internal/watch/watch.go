// Package watch owns development reload: it watches directories and glob patterns with
// fsnotify and reports each burst of changes once, after the burst has settled. It does not
// know what a worker is; the daemon decides what a change means.
package watch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Change is one settled burst of file changes.
type Change struct {
	// Path is the first file that changed in the burst.
	Path string
	// Count is how many events the burst held.
	Count int
}

// DefaultQuiet is how long a burst must be quiet before it is reported.
const DefaultQuiet = 200 * time.Millisecond

// rule is one watch entry: a root directory watched recursively, and a pattern that the
// changed path must match (nil for a plain directory: everything under it counts).
type rule struct {
	root    string
	pattern *regexp.Regexp
}

// Watcher reports settled bursts of changes; see Run.
type Watcher struct {
	fsw   *fsnotify.Watcher
	rules []rule
	quiet time.Duration
}

// New watches entries, each a directory (watched with everything below it) or a glob pattern
// such as "src/**/*.php" or "config/*.yaml" ("**" spans directories), relative to dir. It
// fails if an entry's directory does not exist. Run must be called to start reporting.
func New(dir string, entries []string, quiet time.Duration) (*Watcher, error) {
	if quiet <= 0 {
		quiet = DefaultQuiet
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	w := &Watcher{fsw: fsw, quiet: quiet}
	for _, e := range entries {
		r, err := parseEntry(dir, e)
		if err != nil {
			fsw.Close()
			return nil, err
		}
		if err := w.addTree(r.root); err != nil {
			fsw.Close()
			return nil, fmt.Errorf("workers.watch: %q: %w", e, err)
		}
		w.rules = append(w.rules, r)
	}
	return w, nil
}

func parseEntry(dir, entry string) (rule, error) {
	p := entry
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	// An absolute path, so that the root of "*.php" under the dir "." is that directory and
	// not "/" (an empty leading part).
	p, err := filepath.Abs(p)
	if err != nil {
		return rule{}, fmt.Errorf("workers.watch: %q: %w", entry, err)
	}
	if !strings.ContainsAny(p, "*?[") {
		return rule{root: p}, nil
	}
	// The root is the longest leading part without glob characters.
	parts := strings.Split(p, string(filepath.Separator))
	var rootParts []string
	for _, part := range parts {
		if strings.ContainsAny(part, "*?[") {
			break
		}
		rootParts = append(rootParts, part)
	}
	root := strings.Join(rootParts, string(filepath.Separator))
	if root == "" {
		root = string(filepath.Separator)
	}
	re, err := globRegexp(p)
	if err != nil {
		return rule{}, fmt.Errorf("workers.watch: bad pattern %q: %w", entry, err)
	}
	return rule{root: root, pattern: re}, nil
}

// globRegexp turns a glob with "**" into an anchored regexp over the whole path.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(glob); i++ {
		c := glob[i]
		switch {
		case c == '*' && i+1 < len(glob) && glob[i+1] == '*':
			i++
			if i+1 < len(glob) && glob[i+1] == '/' {
				i++
				b.WriteString("(?:.*/)?") // "**/" matches zero or more directories
			} else {
				b.WriteString(".*")
			}
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			j := strings.IndexByte(glob[i:], ']')
			if j < 0 {
				return nil, errors.New("unclosed [")
			}
			b.WriteString(glob[i : i+j+1])
			i += j
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// addTree watches root and every directory below it.
func (w *Watcher) addTree(root string) error {
	st, err := os.Stat(root)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return w.fsw.Add(root) // a single file
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == ".git" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir // large trees nobody edits by hand
			}
			return w.fsw.Add(path)
		}
		return nil
	})
}

func (w *Watcher) matches(path string) bool {
	for _, r := range w.rules {
		if r.pattern == nil {
			if path == r.root || strings.HasPrefix(path, r.root+string(filepath.Separator)) {
				return true
			}
		} else if r.pattern.MatchString(path) {
			return true
		}
	}
	return false
}

// Run reports changes on the returned channel until ctx is done, then closes it and the
// watcher. New directories created under a watched one are watched too.
func (w *Watcher) Run(ctx context.Context) <-chan Change {
	out := make(chan Change)
	go func() {
		defer close(out)
		defer w.fsw.Close()
		var pending *Change
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.fsw.Events:
				if !ok {
					return
				}
				if ev.Has(fsnotify.Create) {
					if st, err := os.Stat(ev.Name); err == nil && st.IsDir() {
						_ = w.addTree(ev.Name)
					}
				}
				if ev.Has(fsnotify.Chmod) || !w.matches(ev.Name) {
					continue
				}
				if pending == nil {
					pending = &Change{Path: ev.Name}
				}
				pending.Count++
				timer.Reset(w.quiet)
			case <-timer.C:
				if pending != nil {
					select {
					case out <- *pending:
					case <-ctx.Done():
						return
					}
					pending = nil
				}
			case <-w.fsw.Errors:
				// Overflow or a vanished directory: the next event still triggers a reload.
			}
		}
	}()
	return out
}
