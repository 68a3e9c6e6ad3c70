package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads the YAML file at path over Default() and checks it; see Parse. An error reading the
// file is returned as is, so errors.Is(err, fs.ErrNotExist) tells a missing file.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return Parse(path, data)
}

// Parse reads a YAML configuration over Default(): a key the file sets replaces the default,
// except that workers.env and workers.php_ini add their entries to the defaults. An empty file
// gives Default(). In values, not keys or comments, ${NAME} and ${NAME:-default} are replaced
// from the environment, and $$ stands for a single $.
//
// Parse checks what Validate checks, except that it does not require workers.command, which the
// command line may still supply. Every problem is an *Error naming name (the file, as it should
// appear in messages), the line and the dotted key; several are joined in file order. On error
// the returned Config is the zero Config.
func Parse(name string, data []byte) (Config, error) {
	return parse(name, data, os.LookupEnv)
}

func parse(name string, data []byte, lookup func(string) (string, bool)) (Config, error) {
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return c, nil
	case err != nil:
		return Config{}, syntaxError(name, err, data)
	}
	for { // only empty documents may follow
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Config{}, syntaxError(name, err, data)
		}
		if len(next.Content) > 0 && !isNull(next.Content[0]) {
			return Config{}, &Error{File: name, Line: next.Line, Msg: "a second YAML document: a configuration is one document, so remove the ---"}
		}
	}

	d := &decoder{file: name, lookup: lookup, lines: map[string]int{}}
	if len(doc.Content) > 0 {
		d.document(doc.Content[0], &c)
	}
	// workers.fork's default depends on the runtime and the command the file gives; a value
	// that could not be read is reported once, not again as a fork the runtime refuses.
	if _, set := d.lines["workers.fork"]; !set || slices.ContainsFunc(d.errs, func(e *Error) bool { return e.Key == "workers.fork" }) {
		c.Workers.Fork = c.Workers.DefaultFork()
	}
	for _, e := range c.validate(false) {
		e.File, e.Line = name, d.lines[e.Key]
		d.errs = append(d.errs, e)
	}
	if err := joinErrors(d.errs); err != nil {
		return Config{}, err
	}
	return c, nil
}

// yamlLine matches the line number in yaml.v3's syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// parserProblems are yaml.v3's parser errors (as opposed to its scanner errors). yaml.v3 numbers
// their lines from 0, and leaves the number out for the first line; syntaxError adds 1.
var parserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found undefined tag handle",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

// syntaxError turns a yaml.v3 error into an *Error with yaml's message and line, the line
// counted from 1 whatever the kind of error.
func syntaxError(name string, err error, data []byte) error {
	msg, line := strings.TrimPrefix(err.Error(), "yaml: "), 0
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = err.Error()[len(m[0]):]
	}
	if slices.Contains(parserProblems, msg) {
		line++
	}
	// At the end of the file yaml counts one line past the last.
	last := bytes.Count(data, []byte("\n"))
	if !bytes.HasSuffix(data, []byte("\n")) {
		last++
	}
	line = min(line, last)
	if strings.Contains(msg, "cannot start any token") && line > 0 {
		if lines := bytes.Split(data, []byte("\n")); line <= len(lines) && bytes.Contains(lines[line-1], []byte("\t")) {
			msg += " (a tab: YAML indents with spaces only)"
		}
	}
	return &Error{File: name, Line: line, Msg: msg}
}

// decoder reads the YAML tree into a Config, collecting every problem rather than stopping at
// the first, and remembers the line of each key for the errors of validate.
type decoder struct {
	file   string
	lookup func(string) (string, bool)
	errs   []*Error
	lines  map[string]int // dotted key -> line
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Key: path, Msg: fmt.Sprintf(format, args...)})
}

// document reads the root node into c.
func (d *decoder) document(root *yaml.Node, c *Config) {
	sections, keys := names()
	bound := schema(c)
	d.mapping(root, "", sections, func(name string, v *yaml.Node) {
		s := bound[slices.Index(sections, name)]
		d.mapping(v, name, keys[name], func(kname string, v *yaml.Node) {
			s.keys[slices.Index(keys[name], kname)].decode(d, v, name+"."+kname)
		})
	})
}

// mapping calls fn for each entry of the mapping n, in file order, after recording the key's
// line. Keys must be in known, or be any name when known is nil (workers.env, for one). It
// reports unknown and repeated keys. A null n is an empty mapping, so that a section with every
// key commented out is fine.
func (d *decoder) mapping(n *yaml.Node, path string, known []string, fn func(name string, v *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		switch {
		case path == "":
			d.errorf(n, "", "want a mapping with the sections http, workers, admin and log, got %s", describe(n))
		case known == nil:
			d.errorf(n, path, "want a mapping of names to values, got %s", describe(n))
		default:
			d.errorf(n, path, "want a mapping of keys, got %s", describe(n))
		}
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || isNull(k) {
			d.errorf(k, path, "want a key name, got %s", describe(k))
			continue
		}
		if k.Tag == "!!merge" {
			d.errorf(k, path, "merge keys (<<) are not supported: write the keys out")
			continue
		}
		kpath := join(path, k.Value)
		if line, ok := seen[k.Value]; ok {
			d.errorf(k, kpath, "set twice (first on line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		if known != nil && !slices.Contains(known, k.Value) {
			d.errorf(k, kpath, "unknown key%s", hint(path, k.Value))
			continue
		}
		d.lines[kpath] = k.Line
		fn(k.Value, v)
	}
}

// hint suggests what an unknown key under section (empty for the top level) may have meant.
func hint(section, name string) string {
	sectionNames, keyNames := names()
	if section != "" && slices.Contains(sectionNames, name) {
		return fmt.Sprintf(" (%s is a section of its own: check the indentation)", name)
	}
	var homes []string
	for _, s := range sectionNames {
		if s != section && slices.Contains(keyNames[s], name) {
			homes = append(homes, s)
		}
	}
	if len(homes) > 0 {
		return fmt.Sprintf(" (%s belongs under %s)", name, strings.Join(homes, " or "))
	}
	known := sectionNames
	if section != "" {
		known = keyNames[section]
	}
	if s := nearest(name, known); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", s)
	}
	if section == "" {
		return " (the sections are http, workers, admin and log)"
	}
	return ""
}

// nearest returns the name in known closest to name, if it is close enough to be a typo.
func nearest(name string, known []string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	best, bestDist := "", 3
	for _, k := range known {
		dist := editDistance(norm(name), norm(k))
		if len(k) <= 4 && dist > 1 {
			continue
		}
		if dist < bestDist {
			best, bestDist = k, dist
		}
	}
	return best
}

// editDistance counts the insertions, deletions, substitutions and swaps of adjacent bytes that
// turn a into b (optimal string alignment distance).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// scalar returns the expanded text of the scalar v. Otherwise it reports that it wanted want.
func (d *decoder) scalar(v *yaml.Node, path, want string) (string, bool) {
	v = resolve(v)
	if v.Kind != yaml.ScalarNode || isNull(v) {
		d.errorf(v, path, "want %s, got %s", want, describe(v))
		return "", false
	}
	s, err := expand(v.Value, d.lookup)
	if err != nil {
		d.errorf(v, path, "%v", err)
		return "", false
	}
	return s, true
}

// string reads a string; null is the empty string.
func (d *decoder) string(v *yaml.Node, path string) (string, bool) {
	if isNull(resolve(v)) {
		return "", true
	}
	return d.scalar(v, path, "a string")
}

func (d *decoder) int(v *yaml.Node, path string) (int, bool) {
	s, ok := d.scalar(v, path, "a whole number")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			d.errorf(v, path, "%s is too large", s)
		} else {
			d.errorf(v, path, "want a whole number, got %q", s)
		}
		return 0, false
	}
	return n, true
}

func (d *decoder) bool(v *yaml.Node, path string) (bool, bool) {
	s, ok := d.scalar(v, path, "true or false")
	if !ok {
		return false, false
	}
	switch strings.ToLower(s) {
	case "true", "yes", "on":
		return true, true
	case "false", "no", "off":
		return false, true
	}
	d.errorf(v, path, "want true or false, got %q", s)
	return false, false
}

// list reads a list of strings; a single string is a list of one, and null an empty list.
func (d *decoder) list(v *yaml.Node, path string) ([]string, bool) {
	r := resolve(v)
	switch {
	case isNull(r):
		return nil, true
	case r.Kind == yaml.ScalarNode:
		s, ok := d.scalar(r, path, "")
		if !ok {
			return nil, false
		}
		return []string{s}, true
	case r.Kind != yaml.SequenceNode:
		d.errorf(r, path, "want a list of strings, got %s", describe(r))
		return nil, false
	}
	var list []string
	ok := true
	for i, item := range r.Content {
		ipath := path + "[" + strconv.Itoa(i) + "]"
		d.lines[ipath] = item.Line
		s, iok := d.scalar(item, ipath, "a string")
		ok = ok && iok
		list = append(list, s)
	}
	return list, ok
}

// stringMap calls set for each entry of a mapping of names to strings; a null value is the
// empty string.
func (d *decoder) stringMap(v *yaml.Node, path string, set func(name, value string)) {
	d.mapping(v, path, nil, func(name string, v *yaml.Node) {
		if s, ok := d.string(v, join(path, name)); ok {
			set(name, s)
		}
	})
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// describe names what n is, for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case isNull(n):
		return "nothing"
	case n.Kind == yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "something else"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
