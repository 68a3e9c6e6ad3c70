package integration

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDebianPackage builds the .deb with make deb (dpkg-deb), unpacks it into a scratch root as
// dpkg would install it, and serves requests from the installed binary: a worker script that
// loads the installed PHP library, and classic mode, both on the installed native runtime
// (issue 15 item 24).
func TestDebianPackage(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb is not installed (apt-get install dpkg)")
	}
	t.Parallel()
	out := t.TempDir()
	make := exec.Command("make", "-s", "deb", "DEB_OUT="+out)
	make.Dir = ".."
	if b, err := make.CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "peregrine_*_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb made %v", debs)
	}
	fields, err := exec.Command("dpkg-deb", "-f", debs[0], "Package", "Depends").Output()
	if err != nil || !strings.Contains(string(fields), "Package: peregrine") || !strings.Contains(string(fields), "libphp8.2-embed") {
		t.Fatalf("control fields: %v %s", err, fields)
	}
	root := t.TempDir()
	if b, err := exec.Command("dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v %s", err, b)
	}
	for _, f := range []string{"usr/bin/peregrine", "usr/bin/peregrine-php", "usr/share/peregrine/php/autoload.php",
		"usr/share/peregrine/php/src/Worker.php", "lib/systemd/system/peregrine.service", "etc/peregrine/peregrine.yaml"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("the package lacks %s: %v", f, err)
		}
	}
	unit, _ := os.ReadFile(filepath.Join(root, "lib/systemd/system/peregrine.service"))
	for _, want := range []string{"ExecStart=/usr/bin/peregrine serve -c /etc/peregrine/peregrine.yaml", "ExecReload=/bin/kill -HUP $MAINPID"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	installed := filepath.Join(root, "usr", "bin", "peregrine")

	// The shipped config is valid once its document root exists.
	cfg, _ := os.ReadFile(filepath.Join(root, "etc/peregrine/peregrine.yaml"))
	docroot := t.TempDir()
	local := filepath.Join(t.TempDir(), "peregrine.yaml")
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(string(cfg), "/var/www/html", docroot)), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(installed, "config", "check", "-c", local).CombinedOutput(); err != nil {
		t.Errorf("config check of the shipped config: %v\n%s", err, b)
	}

	app := t.TempDir()
	worker := filepath.Join(app, "worker.php")
	script := "<?php\ndeclare(strict_types=1);\nrequire '" + filepath.Join(root, "usr/share/peregrine/php/autoload.php") + "';\n" +
		"Peregrine\\Worker::create()->serve(fn (Peregrine\\Http\\Request $r) => new Peregrine\\Http\\Response(200, [], 'installed worker ' . PHP_SAPI));\n"
	if err := os.WriteFile(worker, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	url := startInstalled(t, installed, app, "serve", worker, "--workers", "1", "--address", "127.0.0.1:0")
	if r := get(t, url+"/"); r.Status != 200 || !strings.HasPrefix(string(r.Body), "installed worker ") {
		t.Fatalf("worker mode from the package: %d %q", r.Status, r.Body)
	}

	// docs/operations.md's Composer recipe: a path repository at the installed library.
	if _, err := exec.LookPath("composer"); err != nil {
		t.Log("composer is not installed (apt-get install composer): the Composer recipe is not checked")
	} else {
		project := t.TempDir()
		composerJSON := `{"repositories": [{"type": "path", "url": "` + filepath.Join(root, "usr/share/peregrine/php") +
			`", "options": {"symlink": false}}, {"packagist.org": false}], "require": {"peregrine/worker": "*@dev"}}`
		if err := os.WriteFile(filepath.Join(project, "composer.json"), []byte(composerJSON), 0o644); err != nil {
			t.Fatal(err)
		}
		composer := exec.Command("composer", "update", "--no-interaction", "--no-progress")
		composer.Dir = project
		composer.Env = append(os.Environ(), "COMPOSER_HOME="+t.TempDir(), "COMPOSER_ALLOW_SUPERUSER=1", "COMPOSER_NO_AUDIT=1")
		if b, err := composer.CombinedOutput(); err != nil {
			t.Fatalf("composer update with the path repository: %v\n%s", err, b)
		}
		viaComposer := filepath.Join(project, "worker.php")
		script := "<?php\ndeclare(strict_types=1);\nrequire __DIR__ . '/vendor/autoload.php';\n" +
			"Peregrine\\Worker::create()->serve(fn (Peregrine\\Http\\Request $r) => new Peregrine\\Http\\Response(200, [], 'composer worker'));\n"
		if err := os.WriteFile(viaComposer, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		url := startInstalled(t, installed, project, "serve", viaComposer, "--workers", "1", "--address", "127.0.0.1:0")
		if r := get(t, url+"/"); r.Status != 200 || string(r.Body) != "composer worker" {
			t.Fatalf("a worker loading the library through Composer: %d %q", r.Status, r.Body)
		}
	}

	if err := os.WriteFile(filepath.Join(docroot, "index.php"), []byte("<?php echo 'classic ', 6 * 7;"), 0o644); err != nil {
		t.Fatal(err)
	}
	url = startInstalled(t, installed, app, "serve", "--root", docroot, "--workers", "1", "--address", "127.0.0.1:0")
	if r := get(t, url+"/index.php"); r.Status != 200 || string(r.Body) != "classic 42" {
		t.Fatalf("classic mode from the package: %d %q", r.Status, r.Body)
	}
}

// startInstalled runs an installed peregrine until the test ends and returns its URL. PATH
// holds no peregrine-php: the installed binary must find its own runtime beside it.
func startInstalled(t *testing.T, binary, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin", "PEREGRINE_TEST_TAG=installed")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	found := make(chan string, 1)
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		banner := regexp.MustCompile(`serving (http://\S+) with`)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := banner.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				_, _ = io.Copy(io.Discard, stderr)
				return
			}
		}
		close(found)
	}()
	select {
	case url, ok := <-found:
		if !ok {
			t.Fatalf("the installed peregrine exited: %s", log.String())
		}
		return url
	case <-time.After(60 * time.Second):
		t.Fatal("the installed peregrine did not start within 60s")
	}
	return ""
}
