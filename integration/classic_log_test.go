package integration

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestClassicFatalNamesTheRequest (issue 25 item 24): in classic mode, the log record of a
// script's fatal error, uncaught exception or warning names the request it happened in, as
// nginx's error log does (request: "GET /fatal.php?x=1 HTTP/1.1"), in a request attribute; a
// quote in the target stays inside it, and the next request's record names its own.
func TestClassicFatalNamesTheRequest(t *testing.T) {
	t.Parallel()
	root := writeTree(t, map[string]string{
		"fatal.php": "<?php\n$x = null;\n$x->foo();\n",
		"oom.php":   "<?php\nini_set('memory_limit', '8M');\n$a = [];\nwhile (true) { $a[] = str_repeat('x', 1 << 20); }\n",
		"warn.php":  "<?php\nini_set('log_errors', '1');\ntrigger_error('careful', E_USER_WARNING);\necho 'ok';\n",
	})
	s := startServer(t, "log:\n  format: json\n"+classicConfig(root, ""))
	for _, c := range []struct{ path, msg, request string }{
		{"/fatal.php?x=1", `Uncaught Error: Call to a member function foo\(\) on null`, "GET /fatal.php?x=1 HTTP/1.1"},
		{"/oom.php?y=%22q%22", `Allowed memory size of 8388608 bytes exhausted`, `GET /oom.php?y=%22q%22 HTTP/1.1`},
		{"/fatal.php/extra", `Uncaught Error: Call to a member function foo\(\) on null`, "GET /fatal.php/extra HTTP/1.1"},
		{"/warn.php", `PHP Warning:  careful`, "GET /warn.php HTTP/1.1"},
	} {
		r := get(t, s.URL+c.path)
		if (c.path == "/warn.php") != (r.Status == 200) {
			t.Errorf("%s: status %d", c.path, r.Status)
		}
		line := s.log.waitFor(t, `\{[^\n]*"msg":"[^"]*`+c.msg+`[^\n]*"request":"`+regexp.QuoteMeta(c.request)+`"[^\n]*\}`, 10*time.Second)
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%s: %v: %s", c.path, err, line)
		}
		if msg, _ := rec["msg"].(string); strings.Contains(msg, "request:") {
			t.Errorf("%s: the request is left in the message too: %q", c.path, msg)
		}
		if c.path != "/warn.php" && rec["level"] != "ERROR" {
			t.Errorf("%s: level %v", c.path, rec["level"])
		}
	}
}
