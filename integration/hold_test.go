package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

// holdScript is the worker holdWorker writes: GET /hold?until=F logs "holding in URI" to
// stderr, waits until the file F exists (120 s at most, then it answers 500) and answers 200
// "released"; every other path answers the worker's pid at once. It waits for the file to
// appear, not to vanish, because PHP caches the stat of a file that exists.
const holdScript = `<?php
declare(strict_types=1);

require '%s';

use Peregrine\Http\Request;
use Peregrine\Http\Response;

Peregrine\Worker::create()->serve(function (Request $r): Response {
    if ($r->path !== '/hold') {
        return new Response(200, ['Content-Type' => 'text/plain'], (string) getmypid());
    }
    fwrite(STDERR, "holding in {$r->uri}\n");
    $until = (string) $r->queryParams['until'];
    $deadline = microtime(true) + 120;
    while (!file_exists($until)) {
        if (microtime(true) > $deadline) {
            return new Response(500, [], "$until never appeared");
        }
        usleep(5000);
    }
    return new Response(200, [], 'released');
});
`

// holdWorker writes the hold worker (holdScript) in a directory of the test's own and returns
// its path. With it a test keeps a worker busy for exactly as long as its checks need and ends
// the request itself (hold), where a sleep would have to outlast every delay of a loaded
// machine.
func holdWorker(t *testing.T) string {
	t.Helper()
	autoload, err := filepath.Abs(filepath.Join("..", "php", "autoload.php"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "hold.php")
	if err := os.WriteFile(script, fmt.Appendf(nil, holdScript, autoload), 0o644); err != nil {
		t.Fatal(err)
	}
	return script
}

// hold is a release file of the hold worker: the requests to its path wait until release
// creates it, which the test's cleanup does too (before the servers it started earlier stop).
type hold struct {
	t    *testing.T
	file string
}

func newHold(t *testing.T) *hold {
	t.Helper()
	h := &hold{t: t, file: filepath.Join(t.TempDir(), "release")}
	t.Cleanup(h.release)
	return h
}

// path is the request path that waits for the release.
func (h *hold) path() string { return "/hold?until=" + url.QueryEscape(h.file) }

// release ends every request waiting on h, and lets those sent later through.
func (h *hold) release() {
	if err := os.WriteFile(h.file, nil, 0o644); err != nil {
		h.t.Error(err)
	}
}

// outcome is a response, or the client's error.
type outcome struct {
	response
	err error
}

// getAsync sends GET target on another goroutine, which must not end the test (t.Fatal); the
// outcome comes on the channel.
func getAsync(target string, headers ...string) <-chan outcome {
	c := make(chan outcome, 1)
	go func() {
		r, err := doErr(context.Background(), "GET", target, nil, headers...)
		c <- outcome{r, err}
	}()
	return c
}
