package httpserver

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// FuzzHandlerFrame parses raw HTTP requests with net/http's own reader, serves them with the
// Handler in front of a Runner that decodes the REQUEST frame, and checks that the frame
// carries the request: method, target, path and query, protocol, client address, every header
// (names lower-cased, values verbatim), the body as the handler read it, and uploads on disk
// while the request runs and gone after. A request the handler does not pass on gets a 4xx.
// The worker's RESPONSE comes back to the client as it was sent.
func FuzzHandlerFrame(f *testing.F) {
	seeds := []string{
		"GET /a?b=c&d[]=e HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nX-A: 2\r\nCookie: k=v\r\n\r\n",
		"POST /p%20q HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"PUT /p HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
		"GET http://example.com/abs?x HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /? HTTP/1.1\r\nHost: x\r\n\r\n",
	}
	form := "--B\r\nContent-Disposition: form-data; name=\"a[]\"\r\n\r\n1\r\n" +
		"--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x.txt\"\r\n\r\ndata\r\n--B--\r\n"
	seeds = append(seeds, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=B\r\nContent-Length: "+
		strconv.Itoa(len(form))+"\r\n\r\n"+form)
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // net/http answers it with 400 before a handler sees it
		}
		req.RemoteAddr = "192.0.2.1:1234"
		var consumed bytes.Buffer
		req.Body = struct {
			io.Reader
			io.Closer
		}{io.TeeReader(req.Body, &consumed), req.Body}
		multipart := isMultipart(req.Header.Get("Content-Type"))

		var got *protocol.Request
		response := protocol.Response{Status: 201, Headers: []protocol.Field{{Name: "x-out", Value: "v"}}, Body: []byte("answer")}
		h := NewHandler(runnerFunc(func(_ context.Context, frame []byte) ([]byte, error) {
			hdr, payload, err := protocol.ReadFrame(bytes.NewReader(frame), 1<<30)
			if err != nil || hdr.Type != protocol.TypeRequest || int(hdr.Length) != len(frame)-protocol.HeaderSize {
				t.Fatalf("the handler wrote a bad frame: %+v %v", hdr, err)
			}
			if got, err = protocol.DecodeRequest(payload); err != nil {
				t.Fatalf("the handler's frame does not decode: %v", err)
			}
			for _, f := range got.Files {
				if _, err := os.Stat(f.TempPath); f.TempPath != "" && err != nil {
					t.Errorf("upload %q is not on disk while the request runs: %v", f.Name, err)
				}
			}
			out, _ := protocol.AppendResponse(nil, 0, &response)
			return out[protocol.HeaderSize:], nil
		}), Options{MaxBodySize: 1 << 20, TempDir: t.TempDir()})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		if got == nil {
			if rec.Code < 400 || rec.Code > 499 {
				t.Fatalf("the handler kept the request from PHP with status %d", rec.Code)
			}
			return
		}
		if rec.Code != response.Status || rec.Body.String() != string(response.Body) || rec.Header().Get("X-Out") != "v" ||
			rec.Header().Get("Content-Length") != strconv.Itoa(len(response.Body)) {
			t.Fatalf("the worker's response came back as %d %v %q", rec.Code, rec.Header(), rec.Body)
		}
		if got.Method != req.Method || got.URI != req.RequestURI || got.Protocol != req.Proto ||
			got.RemoteAddr != "192.0.2.1" || got.RemotePort != "1234" || got.Scheme != "http" {
			t.Fatalf("frame %+v for request %s %q %s", got, req.Method, req.RequestURI, req.Proto)
		}
		if strings.HasPrefix(req.RequestURI, "/") {
			path, query, hasQuery := strings.Cut(req.RequestURI, "?")
			if got.Path != path || got.Query != query || (!hasQuery && got.Query != "") {
				t.Fatalf("target %q became path %q query %q", req.RequestURI, got.Path, got.Query)
			}
		}
		want := []protocol.Field{{Name: "host", Value: req.Host}}
		for name, values := range req.Header {
			if name == "Content-Length" && !multipart && req.ContentLength < 0 {
				continue
			}
			for _, v := range values {
				want = append(want, protocol.Field{Name: strings.ToLower(name), Value: v})
			}
		}
		if !multipart {
			if !bytes.Equal(got.Body, consumed.Bytes()) {
				t.Fatalf("the frame's body (%d bytes) is not what the client sent (%d bytes)", len(got.Body), consumed.Len())
			}
			if req.ContentLength < 0 {
				want = append(want, protocol.Field{Name: "content-length", Value: strconv.Itoa(len(got.Body))})
			}
		}
		byField := func(a, b protocol.Field) int { return strings.Compare(a.Name+"\x00"+a.Value, b.Name+"\x00"+b.Value) }
		slices.SortFunc(want[1:], byField)
		gotHeaders := slices.Clone(got.Headers)
		if len(gotHeaders) > 0 {
			slices.SortFunc(gotHeaders[1:], byField)
		}
		if !slices.Equal(gotHeaders, want) {
			t.Fatalf("headers\n got %q\nwant %q", gotHeaders, want)
		}
		for _, f := range got.Files {
			if _, err := os.Stat(f.TempPath); f.TempPath != "" && !os.IsNotExist(err) {
				t.Fatalf("upload %q left on disk after the request: %v", f.TempPath, err)
			}
		}
	})
}
