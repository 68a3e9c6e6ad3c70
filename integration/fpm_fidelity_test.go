package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PHP-FPM fidelity checks through the real binary (issue 15), in worker mode on both runtimes;
// classic mode's are compared with nginx + PHP-FPM in legacy_test.go.

var fidelityRuntimes = []string{"native", "cli"}

// TestOutOfRangeStatusIs502 sets statuses no answer can carry (1000; 65736, which 16 bits would
// wrap to 200; -1): each is answered 502 with an empty body, a warning names the status, and
// the same worker serves the next request, as nginx answers 502 and FPM keeps its child.
func TestOutOfRangeStatusIs502(t *testing.T) {
	for _, rt := range fidelityRuntimes {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, "workers:\n  command: php "+fixture(t, "fidelity_globals.php")+"\n  runtime: "+rt+"\n  count: 1\n")
			pid := string(get(t, s.URL+"/").Body)
			for _, code := range []int{1000, 65736, -1, 99} {
				r := get(t, fmt.Sprintf("%s/?code=%d", s.URL, code))
				if r.Status != 502 || len(r.Body) != 0 {
					t.Errorf("http_response_code(%d): %d %q, want 502 and no body", code, r.Status, r.Body)
				}
				s.log.waitFor(t, fmt.Sprintf(`the script set the HTTP status %d, outside 100\.\.999: answering 502`, code), 10*time.Second)
				if again := string(get(t, s.URL+"/").Body); again != pid {
					t.Errorf("after status %d the worker changed: pid %s, was %s", code, again, pid)
				}
			}
			if r := get(t, s.URL+"/?code=999"); r.Status != 999 || string(r.Body) != pid {
				t.Errorf("status 999: %d %q, want 999 and the pid", r.Status, r.Body)
			}
		})
	}
}

// TestWorkerScriptForTheCLIRuns runs a worker script written for the cli runtime on both: the
// CLI's STDERR writes to the server's log, and Request::$headers holds a header sent twice as
// two values and a header named with digits.
func TestWorkerScriptForTheCLIRuns(t *testing.T) {
	for _, rt := range append(fidelityRuntimes, "native\n  fork: true") { // forked by a template too
		t.Run(strings.Fields(rt)[0]+map[bool]string{true: "-fork"}[strings.Contains(rt, "fork")], func(t *testing.T) {
			t.Parallel()
			s := startServer(t, "workers:\n  command: php "+fixture(t, "fidelity_raw.php")+"\n  runtime: "+rt+"\n  count: 1\n")
			s.log.waitFor(t, "fidelity worker booted", 10*time.Second)
			if r := get(t, s.URL+"/stderr"); r.Status != 200 || string(r.Body) != "written" {
				t.Errorf("/stderr: %d %q", r.Status, r.Body)
			}
			s.log.waitFor(t, "fidelity: to stderr", 10*time.Second)
			r := do(t, "GET", s.URL+"/headers", nil, "X-Multi", "a", "X-Multi", "b", "123", "x")
			var headers map[string][]string
			if err := json.Unmarshal(r.Body, &headers); err != nil || r.Status != 200 {
				t.Fatalf("/headers: %d %q %v", r.Status, r.Body, err)
			}
			if !reflect.DeepEqual(headers["x-multi"], []string{"a", "b"}) || !reflect.DeepEqual(headers["123"], []string{"x"}) {
				t.Errorf("Request::$headers: %v; want x-multi [a b] and 123 [x]", headers)
			}
		})
	}
}

// TestHeaderNameFromInputIsRefused: a raw-mode handler that names a response header (or an early
// hint) from input gets a 500, never a header of another name, on both runtimes; a valid name
// taken from input is sent.
func TestHeaderNameFromInputIsRefused(t *testing.T) {
	for _, rt := range fidelityRuntimes {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, "workers:\n  command: php "+fixture(t, "fidelity_raw.php")+"\n  runtime: "+rt+"\n  count: 1\n")
			for _, path := range []string{"/header-from-input", "/hint-from-input"} {
				for _, name := range []string{"Set-Cookie: injected=1; X-D", "X-A\r\nSet-Cookie: injected=1", "X A", ""} {
					r := get(t, s.URL+path+"?name="+url.QueryEscape(name))
					if r.Status != 500 || r.Header.Get("Set-Cookie") != "" {
						t.Errorf("%s name %q: %d, Set-Cookie %q; want 500 and no cookie", path, name, r.Status, r.Header.Get("Set-Cookie"))
					}
				}
				s.log.waitFor(t, `name \\?"Set-Cookie: injected=1; X-D\\?" is not a token`, 10*time.Second)
			}
			if r := get(t, s.URL+"/header-from-input?name=X-Chosen"); r.Status != 200 || r.Header.Get("X-Chosen") != "from input" {
				t.Errorf("a valid name from input: %d %v", r.Status, r.Header)
			}
		})
	}
}

// TestPHPUploadFilesAreSweptAfterASIGKILL: PHP's own upload temp files (the native runtime
// parses multipart bodies itself) are written in the daemon's per-pid upload directory, so a
// daemon SIGKILLed while a script holds an upload leaves nothing behind once the next daemon
// has started.
func TestPHPUploadFilesAreSweptAfterASIGKILL(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the daemon's os.TempDir(), and PHP's default upload_tmp_dir
	root := t.TempDir()
	script := `<?php file_put_contents($_GET['marker'], $_FILES['f']['tmp_name']); sleep(60);`
	if err := os.WriteFile(filepath.Join(root, "upload.php"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	config := "http:\n  root: " + root + "\nworkers:\n  runtime: native\n  count: 1\n"
	s := startServer(t, config)
	marker := filepath.Join(t.TempDir(), "tmp_name")
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	w, _ := mw.CreateFormFile("f", "held.txt")
	_, _ = w.Write(bytes.Repeat([]byte("held upload\n"), 1000))
	_ = mw.Close()
	go func() { // answered by no one: the daemon is killed meanwhile
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = doErr(ctx, "POST", s.URL+"/upload.php?marker="+url.QueryEscape(marker), &body, "Content-Type", mw.FormDataContentType())
	}()
	var tmpName string
	eventually(t, 20*time.Second, "the script to hold its upload", func() bool {
		b, err := os.ReadFile(marker)
		tmpName = string(b)
		return err == nil && tmpName != ""
	})
	own := filepath.Join(tmp, "peregrine-uploads-"+strconv.Itoa(s.cmd.Process.Pid))
	if filepath.Dir(tmpName) != own {
		t.Errorf("PHP wrote the upload to %s, want it in the daemon's upload directory %s", tmpName, own)
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	if _, err := os.Stat(tmpName); err != nil {
		t.Fatalf("the upload should outlive a SIGKILLed daemon until the next start: %v", err)
	}
	startServer(t, config)
	if _, err := os.Stat(tmpName); !os.IsNotExist(err) {
		t.Errorf("PHP's upload file %s is still there after the next daemon started: %v", tmpName, err)
	}
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		t.Errorf("the killed daemon's upload directory is still there: %v", err)
	}
}
