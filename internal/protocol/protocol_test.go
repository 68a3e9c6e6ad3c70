package protocol

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestParseHeaderErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"short", []byte{1, 2, 0}, ErrMalformed},
		{"version 1", []byte{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrVersion},
		{"version 2", []byte{2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrVersion},
		{"version 4", []byte{4, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrVersion},
		{"garbage text", []byte("hello world!"), ErrVersion},
		{"type zero", []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrType},
		{"type too big", []byte{3, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseHeader(tt.in); !errors.Is(err, tt.want) {
				t.Fatalf("ParseHeader(%q) = %v, want %v", tt.in, err, tt.want)
			}
		})
	}
}

func TestReadFrame(t *testing.T) {
	frame := AppendFrame(nil, TypeReady, 9, []byte("8.2"))
	tests := []struct {
		name    string
		in      []byte
		max     uint32
		want    error
		payload string
	}{
		{"ok", frame, 100, nil, "8.2"},
		{"too large", frame, 2, ErrTooLarge, ""},
		{"truncated payload", frame[:len(frame)-1], 100, io.ErrUnexpectedEOF, ""},
		{"empty stream", nil, 100, io.EOF, ""},
		{"truncated header", frame[:5], 100, io.ErrUnexpectedEOF, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, p, err := ReadFrame(bytes.NewReader(tt.in), tt.max)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if err == nil && (h.Type != TypeReady || h.ID != 9 || string(p) != tt.payload) {
				t.Fatalf("got %+v %q", h, p)
			}
		})
	}
}

func TestAppendRequestRejectsNUL(t *testing.T) {
	tests := []Request{
		{Method: "GET\x00"},
		{Headers: []Field{{"x", "a\x00b"}}},
		{Files: []File{{Name: "a\x00.txt"}}},
	}
	for _, r := range tests {
		dst := []byte("keep")
		out, err := AppendRequest(dst, 1, &r)
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("AppendRequest(%+v) err = %v", r, err)
		}
		if string(out) != "keep" {
			t.Fatalf("AppendRequest left %q in dst", out)
		}
	}
}

func TestDecodeResponseErrors(t *testing.T) {
	tests := []struct {
		name    string
		payload []byte
	}{
		{"short", []byte{200, 0, 0}},
		{"status too small", []byte{99, 0, 0, 0, 0, 0}},
		{"head past end", []byte{200, 0, 10, 0, 0, 0, 'a'}},
		{"odd headers", []byte{200, 0, 1, 0, 0, 0, 'a'}},
		{"empty name", []byte{200, 0, 2, 0, 0, 0, 0, 'v'}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeResponse(tt.payload); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func FuzzDecodeResponse(f *testing.F) {
	for _, c := range vectorResponses() {
		b, _ := AppendResponse(nil, c.id, &c.resp)
		f.Add(b[HeaderSize:])
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		r, err := DecodeResponse(payload)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode to the same bytes.
		again, err := AppendResponse(nil, 0, &r)
		if err != nil {
			t.Fatalf("decoded response does not re-encode: %v", err)
		}
		if !bytes.Equal(again[HeaderSize:], payload) {
			t.Fatalf("round trip changed payload:\n%q\n%q", payload, again[HeaderSize:])
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, TypeReady, 1, []byte("8.2")))
	f.Add([]byte("garbage on the protocol fd\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, p, err := ReadFrame(bytes.NewReader(in), 1<<16)
		if err != nil {
			return
		}
		if int(h.Length) != len(p) || h.Type < TypeReady || h.Type > TypeError {
			t.Fatalf("accepted inconsistent frame %+v with %d bytes", h, len(p))
		}
	})
}

func FuzzRequestRoundTrip(f *testing.F) {
	f.Add("GET", "/a?b=c", "host", "x", "field", "name.txt", []byte("body"))
	f.Add("POST", "", "", "", "", "", []byte{0, 1, 2})
	f.Fuzz(func(t *testing.T, method, uri, hname, hvalue, field, fname string, body []byte) {
		in := Request{Method: method, URI: uri, Headers: []Field{{hname, hvalue}},
			Files: []File{{Field: field, Name: fname, Size: int64(len(body))}}, Body: body}
		b, err := AppendRequest(nil, 3, &in)
		if err != nil {
			return // a NUL somewhere: refused, as documented
		}
		_, p, err := ReadFrame(bytes.NewReader(b), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeRequest(p)
		if err != nil {
			t.Fatal(err)
		}
		if out.Method != method || out.URI != uri || out.Headers[0].Value != hvalue ||
			out.Files[0].Name != fname || out.Files[0].Field != field || !bytes.Equal(out.Body, body) {
			t.Fatalf("round trip: %+v", out)
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	for _, c := range vectorRequests() {
		b, _ := AppendRequest(nil, c.id, &c.req)
		f.Add(b[HeaderSize:])
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		_, _ = DecodeRequest(payload) // must not panic
	})
}
