package httpserver

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestContentDispositionLikePHP(t *testing.T) {
	tests := []struct {
		header         string
		name, filename string
		isFile         bool
	}{
		{`form-data; name="f"`, "f", "", false},
		{`form-data; name="f"; filename="a.jpg"`, "f", "a.jpg", true},
		{`form-data; name="f"; filename=""`, "f", "", true},
		// RFC 5987 extended parameters are ignored, as PHP ignores them.
		{`form-data; name="f"; filename="safe.jpg"; filename*=UTF-8''evil.php`, "f", "safe.jpg", true},
		{`form-data; name="f"; filename*=UTF-8''evil.php`, "f", "", false},
		{`form-data; name*=UTF-8''admin; name="user"`, "user", "", false},
		{`form-data; name*=UTF-8''admin`, "", "", false},
		// PHP's own quoting: ' as well as ", a backslash escapes the quote, ; inside quotes.
		{`form-data; name='a;b'; filename="x\"y.txt"`, "a;b", `x"y.txt`, true},
		{`form-data; NAME=plain; FileName=f.txt`, "plain", "f.txt", true},
		{`form-data; name="first"; name="last"`, "last", "", false},
		{`form-data;name=unquoted word`, "unquoted", "", false},
	}
	for _, tt := range tests {
		name, filename, isFile := contentDisposition(tt.header)
		if name != tt.name || filename != tt.filename || isFile != tt.isFile {
			t.Errorf("contentDisposition(%s) = %q, %q, %v; want %q, %q, %v", tt.header, name, filename, isFile, tt.name, tt.filename, tt.isFile)
		}
	}
}

func TestParseMultipartIgnoresExtendedFilename(t *testing.T) {
	body := "--x\r\n" +
		"Content-Disposition: form-data; name=\"up\"; filename=\"safe.jpg\"; filename*=UTF-8''evil.php\r\n" +
		"Content-Type: image/jpeg\r\n\r\n" +
		"data\r\n" +
		"--x\r\n" +
		"Content-Disposition: form-data; name=\"role\"; name*=UTF-8''admin\r\n\r\n" +
		"user\r\n" +
		"--x--\r\n"
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	r.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	u, status, err := parseMultipart(r, 0, 0, t.TempDir())
	t.Cleanup(u.cleanup)
	if err != nil {
		t.Fatalf("parseMultipart: %d %v", status, err)
	}
	if len(u.files) != 1 || u.files[0].Name != "safe.jpg" || u.files[0].Field != "up" {
		t.Errorf("files %+v, want one safe.jpg in field up", u.files)
	}
	if u.form != "role=user" {
		t.Errorf("form %q, want role=user", u.form)
	}
}
