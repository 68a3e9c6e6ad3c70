package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	gorilla "github.com/gorilla/websocket"
)

// cdp is a connection to a headless chromium's DevTools protocol.
type cdp struct {
	t  *testing.T
	c  *gorilla.Conn
	id int
}

// call sends a command (to a page's session when session is set) and returns its result,
// skipping the events that come meanwhile.
func (d *cdp) call(session, method string, params any) json.RawMessage {
	d.t.Helper()
	d.id++
	msg := map[string]any{"id": d.id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	if err := d.c.WriteJSON(msg); err != nil {
		d.t.Fatalf("%s: %v", method, err)
	}
	_ = d.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		var r struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct{ Message string }
		}
		if err := d.c.ReadJSON(&r); err != nil {
			d.t.Fatalf("%s: %v", method, err)
		}
		if r.ID != d.id {
			continue
		}
		if r.Error != nil {
			d.t.Fatalf("%s: %s", method, r.Error.Message)
		}
		return r.Result
	}
}

// eval runs JavaScript in a page and returns its value as a string.
func (d *cdp) eval(session, js string) string {
	d.t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	_ = json.Unmarshal(d.call(session, "Runtime.evaluate", map[string]any{"expression": js, "returnByValue": true}), &r)
	return fmt.Sprint(r.Result.Value)
}

// page opens url in a new tab and returns its session.
func (d *cdp) page(url string) string {
	d.t.Helper()
	var target struct{ TargetID string }
	_ = json.Unmarshal(d.call("", "Target.createTarget", map[string]any{"url": url}), &target)
	var att struct{ SessionID string }
	_ = json.Unmarshal(d.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}), &att)
	eventually(d.t, 30*time.Second, "the page loaded", func() bool {
		return d.eval(att.SessionID, "document.readyState") == "complete" && d.eval(att.SessionID, "typeof $") == "function"
	})
	return att.SessionID
}

// TestChatInChromium runs examples/chat in Debian's chromium, headless: two pages see each
// other's messages, and a peregrine reset in between leaves both connected. It skips where
// chromium is not installed.
func TestChatInChromium(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed: scripts/setup.sh installs it, and CI must run this test")
		}
		t.Skip("chromium is not installed (apt-get install chromium; scripts/setup.sh does)")
	}
	admin := freeAddr(t)
	chat, _ := filepath.Abs("../examples/chat/worker.php")
	s := startServer(t, "workers:\n  command: php "+chat+"\n  count: 2\nadmin:\n  address: "+admin+"\n")

	cmd := exec.Command(browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--remote-debugging-port=0", "--user-data-dir="+t.TempDir(), "about:blank")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`DevTools listening on (ws://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	var endpoint string
	select {
	case endpoint = <-found:
	case <-time.After(60 * time.Second):
		t.Fatal("chromium did not start its DevTools listener")
	}
	c, _, err := gorilla.DefaultDialer.Dial(endpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := &cdp{t: t, c: c}

	ann, bob := d.page(s.URL+"/"), d.page(s.URL+"/")
	for session, name := range map[string]string{ann: "ann", bob: "bob"} {
		d.eval(session, fmt.Sprintf("$('name').value = %q; $('join').requestSubmit(); true", name))
		eventually(t, 30*time.Second, name+" connected", func() bool { return d.eval(session, "$('status').textContent") == "connected" })
	}
	say := func(from, to, text string) {
		t.Helper()
		d.eval(from, fmt.Sprintf("$('text').value = %q; $('say').requestSubmit(); true", text))
		eventually(t, 30*time.Second, "the message on the other page", func() bool {
			return strings.Contains(d.eval(to, "$('log').innerText"), text)
		})
	}
	say(ann, bob, "hello from ann")
	say(bob, ann, "hello from bob")
	if out, err := exec.Command(binary, "reset", "-c", writeAdminConfig(t, admin)).CombinedOutput(); err != nil {
		t.Fatalf("peregrine reset: %v\n%s", err, out)
	}
	say(ann, bob, "ann after the reset")
	say(bob, ann, "bob after the reset")
	for session, name := range map[string]string{ann: "ann", bob: "bob"} {
		if st := d.eval(session, "$('status').textContent"); st != "connected" {
			t.Errorf("%s's page after the reset: %s", name, st)
		}
	}
	if testing.Verbose() {
		fmt.Fprintln(os.Stderr, d.eval(ann, "$('log').innerText"))
	}
}
