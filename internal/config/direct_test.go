package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDirectRefusals: in direct mode (http.direct) each setting that needs the server's own
// front is refused, naming its key, from a file (with its line) and from Validate; the
// default compression list is accepted (direct mode leaves answers uncompressed).
func TestDirectRefusals(t *testing.T) {
	root := t.TempDir()
	tests := []struct {
		name, yaml, key string
	}{
		{"tls", "http:\n  direct: true\n  tls:\n    cert: c.pem\n    key: k.pem\n", "http.tls"},
		{"acme", "http:\n  direct: true\n  tls:\n    acme:\n      domains: [a.example]\n", "http.tls"},
		{"root", "http:\n  direct: true\n  root: " + root + "\nworkers:\n  command: [php, w.php]\n", "http.root"},
		{"classic mode", "http:\n  direct: true\n  root: " + root + "\n", "http.root"},
		{"sendfile", "http:\n  direct: true\n  sendfile_dirs: [" + root + "]\n", "http.sendfile_dirs"},
		{"trusted proxies", "http:\n  direct: true\n  trusted_proxies: [10.0.0.0/8]\n", "http.trusted_proxies"},
		{"compression", "http:\n  direct: true\n  compression: [gzip]\n", "http.compression"},
		{"cli runtime", "http:\n  direct: true\nworkers:\n  runtime: cli\n  fork: false\n", "workers.runtime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "peregrine.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), ": "+tt.key+": ") || !strings.Contains(err.Error(), "http.direct") {
				t.Fatalf("Load: %v, want an error naming %s and http.direct", err, tt.key)
			}
			// The same setting without direct mode is not refused for this reason.
			path2 := filepath.Join(t.TempDir(), "peregrine.yaml")
			os.WriteFile(path2, []byte(strings.Replace(tt.yaml, "direct: true", "direct: false", 1)), 0o644)
			if _, err := Load(path2); err != nil && strings.Contains(err.Error(), "http.direct") {
				t.Errorf("without direct mode: %v", err)
			}
		})
	}
	for _, ok := range []string{"http:\n  direct: true\n", "http:\n  direct: true\n  compression: [zstd, br, gzip]\n", "http:\n  direct: true\n  compression: []\n"} {
		path := filepath.Join(t.TempDir(), "peregrine.yaml")
		os.WriteFile(path, []byte(ok), 0o644)
		c, err := Load(path)
		if err != nil || !c.HTTP.Direct {
			t.Errorf("%q: %v, direct %v", ok, err, c.HTTP.Direct)
		}
	}
	c := Default()
	c.Workers.Command = []string{"php", "w.php"}
	c.HTTP.Direct, c.HTTP.TrustedProxies = true, []string{"127.0.0.1"}
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "http.trusted_proxies: http.direct") {
		t.Errorf("Validate: %v", err)
	}
}

// TestDirectAcceptsConcurrency: direct mode runs requests in fibers when workers.concurrency is
// above 1 (native/direct.c, "fibers"), so the setting is no longer refused there.
func TestDirectAcceptsConcurrency(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peregrine.yaml")
	if err := os.WriteFile(path, []byte("http:\n  direct: true\nworkers:\n  concurrency: 256\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil && strings.Contains(err.Error(), "workers.concurrency") {
		t.Fatalf("Load: %v", err)
	}
}
