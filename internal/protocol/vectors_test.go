package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/protocol/vectors.json")

// vector is one entry of testdata/protocol/vectors.json, the file the PHP suite reads too.
// Bodies are base64 so that any byte survives JSON.
type vector struct {
	Name     string          `json:"name"`
	Type     string          `json:"type"`
	Flags    uint16          `json:"flags"`
	ID       uint32          `json:"id"`
	Text     string          `json:"text,omitempty"`   // READY, ERROR and BODY payloads
	Fields   [][2]string     `json:"fields,omitempty"` // HINTS payloads
	Request  *vectorRequest  `json:"request,omitempty"`
	Response *vectorResponse `json:"response,omitempty"`
	Hex      string          `json:"hex"`
}

type vectorRequest struct {
	Method, URI, Path, Query, Protocol string
	RemoteAddr, RemotePort             string
	ServerAddr, ServerPort, Scheme     string
	Form                               string
	Files                              []File
	Params                             [][2]string
	Headers                            [][2]string
	Body                               string // base64
}

type vectorResponse struct {
	Status  int         `json:"status"`
	Headers [][2]string `json:"headers"`
	Body    string      `json:"body"` // base64
}

var allBytes = func() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

func vectorRequests() []struct {
	name string
	id   uint32
	req  Request
} {
	return []struct {
		name string
		id   uint32
		req  Request
	}{
		{"request-get", 1, Request{
			Method: "GET", URI: "/hello?name=world&a[]=1&a[]=2", Path: "/hello", Query: "name=world&a[]=1&a[]=2",
			Protocol: "HTTP/1.1", RemoteAddr: "127.0.0.1", RemotePort: "54321", ServerAddr: "127.0.0.1", ServerPort: "8080", Scheme: "http",
			Headers: []Field{{"Host", "127.0.0.1:8080"}, {"Accept", "*/*"}, {"Cookie", "a=1; b=2"}, {"X-Repeat", "one"}, {"X-Repeat", "two"}},
			Body:    []byte{},
		}},
		{"request-post-binary", 4294967295, Request{
			Method: "POST", URI: "/upload", Path: "/upload", Protocol: "HTTP/1.0", RemoteAddr: "::1", RemotePort: "1",
			ServerAddr: "::1", ServerPort: "80", Scheme: "http",
			Headers: []Field{{"host", "localhost"}, {"content-type", "application/octet-stream"}, {"content-length", "256"}},
			Body:    allBytes,
		}},
		{"request-multipart", 42, Request{
			Method: "POST", URI: "/form", Path: "/form", Protocol: "HTTP/1.1", RemoteAddr: "10.0.0.1", RemotePort: "999",
			ServerAddr: "10.0.0.2", ServerPort: "443", Scheme: "https", Form: "title=Hello+world&tags[]=a&tags[]=b",
			Params: []Field{{"SCRIPT_FILENAME", "/srv/www/form.php"}, {"SCRIPT_NAME", "/form.php"}, {"PATH_INFO", ""}},
			Files: []File{
				{Field: "avatar", Name: "me.png", Type: "image/png", Size: 1234, Error: 0, TempPath: "/tmp/peregrine-upload-1"},
				{Field: "docs[]", Name: "", Type: "", Size: 0, Error: 4, TempPath: ""},
			},
			Headers: []Field{{"host", "example.com"}, {"content-type", "multipart/form-data; boundary=x"}},
			Body:    []byte{},
		}},
	}
}

func vectorResponses() []struct {
	name string
	id   uint32
	resp Response
} {
	return []struct {
		name string
		id   uint32
		resp Response
	}{
		{"response-hello", 1, Response{Status: 200, Headers: []Field{{"Content-Type", "text/plain"}}, Body: []byte("Hello, world!")}},
		{"response-no-headers", 2, Response{Status: 204, Body: []byte{}}},
		{"response-cookies-binary", 4294967295, Response{Status: 500, Headers: []Field{{"Set-Cookie", "a=1"}, {"Set-Cookie", "b=2"}, {"X-Empty", ""}}, Body: allBytes}},
	}
}

func buildVectors(t *testing.T) []vector {
	t.Helper()
	var vs []vector
	vs = append(vs, vector{Name: "ready", Type: "READY", Text: "8.2.36", Hex: hex.EncodeToString(AppendFrame(nil, TypeReady, 0, []byte("8.2.36")))})
	vs = append(vs, vector{Name: "stop", Type: "STOP", Hex: hex.EncodeToString(AppendFrame(nil, TypeStop, 0, nil))})
	vs = append(vs, vector{Name: "error", Type: "ERROR", Text: "bad frame", Hex: hex.EncodeToString(AppendFrame(nil, TypeError, 0, []byte("bad frame")))})
	vs = append(vs, vector{Name: "body-more-flush", Type: "BODY", Flags: FlagMore | FlagFlush, ID: 7, Text: "data: 1\n\n",
		Hex: hex.EncodeToString(AppendFlagged(nil, TypeBody, FlagMore|FlagFlush, 7, []byte("data: 1\n\n")))})
	vs = append(vs, vector{Name: "body-last", Type: "BODY", ID: 7, Hex: hex.EncodeToString(AppendFlagged(nil, TypeBody, 0, 7, nil))})
	vs = append(vs, vector{Name: "done", Type: "DONE", ID: 7, Hex: hex.EncodeToString(AppendFlagged(nil, TypeDone, 0, 7, nil))})
	vs = append(vs, vector{Name: "done-last", Type: "DONE", Flags: FlagLast, ID: 7, Hex: hex.EncodeToString(AppendFlagged(nil, TypeDone, FlagLast, 7, nil))})
	vs = append(vs, vector{Name: "cancel", Type: "CANCEL", ID: 7, Hex: hex.EncodeToString(AppendFrame(nil, TypeCancel, 7, nil))})
	vs = append(vs, vector{Name: "hints", Type: "HINTS", ID: 3, Fields: [][2]string{{"Link", "</app.css>; rel=preload; as=style"}, {"Link", "</app.js>; rel=preload; as=script"}},
		Hex: hex.EncodeToString(AppendFrame(nil, TypeHints, 3, []byte("Link\x00</app.css>; rel=preload; as=style\x00Link\x00</app.js>; rel=preload; as=script")))})
	for _, c := range vectorRequests() {
		b, err := AppendRequest(nil, c.id, &c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		vr := &vectorRequest{Method: c.req.Method, URI: c.req.URI, Path: c.req.Path, Query: c.req.Query, Protocol: c.req.Protocol,
			RemoteAddr: c.req.RemoteAddr, RemotePort: c.req.RemotePort, ServerAddr: c.req.ServerAddr, ServerPort: c.req.ServerPort,
			Scheme: c.req.Scheme, Form: c.req.Form, Files: c.req.Files, Body: base64.StdEncoding.EncodeToString(c.req.Body)}
		for _, h := range c.req.Headers {
			vr.Headers = append(vr.Headers, [2]string{string(appendLower(nil, h.Name)), h.Value})
		}
		for _, p := range c.req.Params {
			vr.Params = append(vr.Params, [2]string{p.Name, p.Value})
		}
		vs = append(vs, vector{Name: c.name, Type: "REQUEST", ID: c.id, Request: vr, Hex: hex.EncodeToString(b)})
	}
	for _, c := range vectorResponses() {
		b, err := AppendResponse(nil, c.id, &c.resp)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		vr := &vectorResponse{Status: c.resp.Status, Headers: [][2]string{}, Body: base64.StdEncoding.EncodeToString(c.resp.Body)}
		for _, h := range c.resp.Headers {
			vr.Headers = append(vr.Headers, [2]string{h.Name, h.Value})
		}
		vs = append(vs, vector{Name: c.name, Type: "RESPONSE", ID: c.id, Response: vr, Hex: hex.EncodeToString(b)})
	}
	return vs
}

var vectorsPath = filepath.Join("..", "..", "testdata", "protocol", "vectors.json")

// TestVectors checks the encoders against the shared golden file, which the PHP suite decodes
// and re-encodes too; `go test ./internal/protocol -update` rewrites it after a deliberate change.
func TestVectors(t *testing.T) {
	got, err := json.MarshalIndent(buildVectors(t), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(vectorsPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/protocol -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoders disagree with %s; if the change is deliberate, run with -update and update the PHP side", vectorsPath)
	}
}

// TestVectorsDecode decodes every golden frame and compares it with its description.
func TestVectorsDecode(t *testing.T) {
	for _, c := range vectorRequests() {
		t.Run(c.name, func(t *testing.T) {
			b, err := AppendRequest(nil, c.id, &c.req)
			if err != nil {
				t.Fatal(err)
			}
			h, payload, err := ReadFrame(bytes.NewReader(b), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if h.Type != TypeRequest || h.ID != c.id {
				t.Fatalf("header = %+v", h)
			}
			got, err := DecodeRequest(payload)
			if err != nil {
				t.Fatal(err)
			}
			want := c.req
			want.Headers = nil
			for _, f := range c.req.Headers {
				want.Headers = append(want.Headers, Field{string(appendLower(nil, f.Name)), f.Value})
			}
			if !reflect.DeepEqual(*got, want) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", *got, want)
			}
		})
	}
	for _, c := range vectorResponses() {
		t.Run(c.name, func(t *testing.T) {
			b, err := AppendResponse(nil, c.id, &c.resp)
			if err != nil {
				t.Fatal(err)
			}
			h, payload, err := ReadFrame(bytes.NewReader(b), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if h.Type != TypeResponse || h.ID != c.id {
				t.Fatalf("header = %+v", h)
			}
			got, err := DecodeResponse(payload)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.resp) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", got, c.resp)
			}
		})
	}
}
