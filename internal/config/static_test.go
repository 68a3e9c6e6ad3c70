package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestStaticErrors covers the errors of http.root, http.index and http.compression.
func TestStaticErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		src  string
		want string // the whole first line of the message
	}{
		{"root missing", "http:\n  root: " + dir + "/none\n",
			"peregrine.yaml:2: http.root: " + dir + "/none does not exist: give the document root, an existing directory"},
		{"root file", "http:\n  root: " + file + "\n",
			"peregrine.yaml:2: http.root: " + file + " is not a directory: give the document root, the directory the site's files are in"},
		{"root list", "http:\n  root: [a, b]\n", "peregrine.yaml:2: http.root: want a string, got a list"},
		{"sendfile dir missing", "http:\n  sendfile_dirs: [" + dir + ", " + dir + "/none]\n",
			"peregrine.yaml:2: http.sendfile_dirs[1]: " + dir + "/none does not exist: give an existing directory"},
		{"sendfile dir file", "http:\n  sendfile_dirs:\n    - " + file + "\n",
			"peregrine.yaml:3: http.sendfile_dirs[0]: " + file + " is not a directory"},
		{"index empty", "http:\n  index: \"\"\n",
			"peregrine.yaml:2: http.index: empty: give the front controller under http.root, e.g. index.php"},
		{"index climbs", "http:\n  index: ../app.php\n",
			`peregrine.yaml:2: http.index: want a path under http.root without .. or NUL, e.g. index.php or public/app.php, got "../app.php"`},
		{"index not php", "http:\n  index: index.html\n",
			`peregrine.yaml:2: http.index: the front controller is a PHP script: want a name ending in .php, got "index.html"`},
		{"coding unknown", "http:\n  compression: [zstd, deflate]\n",
			`peregrine.yaml:2: http.compression[1]: want one of zstd, br, gzip, got "deflate" ([] turns compression off)`},
		{"coding case", "http:\n  compression:\n    - GZIP\n",
			`peregrine.yaml:3: http.compression[0]: want one of zstd, br, gzip, got "GZIP" ([] turns compression off)`},
		{"coding twice", "http:\n  compression: [br, gzip, br]\n",
			`peregrine.yaml:2: http.compression[2]: "br" is listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse("peregrine.yaml", []byte(tt.src), env(nil))
			if err == nil {
				t.Fatalf("no error for\n%s", tt.src)
			}
			first, _, _ := strings.Cut(err.Error(), "\n")
			if first != tt.want {
				t.Errorf("error for\n%s\n got: %s\nwant: %s", tt.src, first, tt.want)
			}
		})
	}
}

func TestStaticValues(t *testing.T) {
	dir := t.TempDir()
	c := mustParse(t, "http:\n  root: "+dir+"\n  index: public/app.php\n  compression: []\n", nil)
	if c.HTTP.Root != dir || c.HTTP.Index != "public/app.php" || len(c.HTTP.Compression) != 0 {
		t.Errorf("got root %q index %q compression %q", c.HTTP.Root, c.HTTP.Index, c.HTTP.Compression)
	}
	c = mustParse(t, "http:\n  compression: br\n", nil)
	if !slices.Equal(c.HTTP.Compression, []string{"br"}) {
		t.Errorf("a single string is a list of one: %q", c.HTTP.Compression)
	}
	// Classic mode: a root and no worker command is a whole configuration.
	c = Default()
	c.HTTP.Root = dir
	if err := c.Validate(); err != nil {
		t.Errorf("classic mode without a command: %v", err)
	}
	c.HTTP.Root = ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "http.root for classic mode") {
		t.Errorf("neither root nor command: %v", err)
	}
	// Default returns a fresh list each time.
	a := Default()
	a.HTTP.Compression[0] = "gzip"
	if Default().HTTP.Compression[0] != "zstd" {
		t.Error("Default shares its compression list")
	}
}
