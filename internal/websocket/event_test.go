package websocket

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
)

var key = "0123456789abcdef0123456789abcdef"

func TestEventRoundTrip(t *testing.T) {
	for _, e := range []Event{
		{Kind: KindOpen, Key: key, ID: "n1.1"},
		{Kind: KindMessage, Key: key, ID: "n1.2", Attributes: []byte(`{"user":"ann"}`), Data: []byte("hello")},
		{Kind: KindMessage, Binary: true, Key: key, ID: "n1.3", Data: []byte{0, 1, 2, 255}},
		{Kind: KindClose, Key: key, ID: "n1.4", Code: 1001, Reason: "going away", Attributes: []byte(`{}`)},
		{Kind: KindMessage, Key: key, ID: "n1.5", Data: bytes.Repeat([]byte("x"), 70000)},
	} {
		b := AppendEvent(nil, &e)
		got, err := DecodeEvent(b)
		if err != nil {
			t.Fatalf("%+v: %v", e, err)
		}
		normalize(&got)
		normalize(&e)
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, e)
		}
	}
}

func normalize(e *Event) {
	if len(e.Attributes) == 0 {
		e.Attributes = nil
	}
	if len(e.Data) == 0 {
		e.Data = nil
	}
}

func TestDecodeEventRefuses(t *testing.T) {
	good := AppendEvent(nil, &Event{Kind: KindMessage, Key: key, ID: "a.1", Attributes: []byte("{}"), Data: []byte("d")})
	for name, b := range map[string][]byte{
		"empty":          nil,
		"short head":     good[:eventHead+KeyLen-1],
		"kind 0":         append([]byte{0}, good[1:]...),
		"kind 4":         append([]byte{4}, good[1:]...),
		"unknown flag":   append([]byte{2, 2}, good[2:]...),
		"id past end":    func() []byte { b := bytes.Clone(good); b[4] = 200; return b }(),
		"lengths wrap":   func() []byte { b := bytes.Clone(good); copy(b[4:16], bytes.Repeat([]byte{0xff}, 12)); return b }(),
		"reason too big": func() []byte { b := bytes.Clone(good); b[12] = 9; return b }(),
	} {
		if _, err := DecodeEvent(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestDecodeReply(t *testing.T) {
	r := Reply{AttributesSet: true, Attributes: []byte(`{"a":1}`), Actions: []Action{
		{Op: OpSend, Data: []byte("hi")}, {Op: OpSend, Binary: true, Data: []byte{0}},
		{Op: OpClose, Code: 4000, Data: []byte("bye")}, {Op: OpJoin, Data: []byte("room")}, {Op: OpLeave, Data: []byte("room")},
	}}
	got, err := DecodeReply(AppendReply(nil, &r))
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if got, err := DecodeReply(nil); err != nil || got.AttributesSet || len(got.Actions) != 0 {
		t.Errorf("empty reply: %+v %v", got, err)
	}
	good := AppendReply(nil, &r)
	for name, b := range map[string][]byte{
		"short":         good[:3],
		"attrs past":    func() []byte { b := bytes.Clone(good); b[1] = 250; return b }(),
		"action cut":    good[:len(good)-1],
		"unknown op":    append(AppendReply(nil, &Reply{}), 9, 0, 0, 0, 0, 0, 0, 0),
		"unknown flags": append([]byte{2}, good[1:]...),
	} {
		if _, err := DecodeReply(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// FuzzEvent: whatever the bytes, decoding never panics, and what decodes encodes back to the
// same bytes (one encoding per event).
func FuzzEvent(f *testing.F) {
	f.Add(AppendEvent(nil, &Event{Kind: KindMessage, Key: key, ID: "n.1", Attributes: []byte("{}"), Data: []byte("x")}))
	f.Add(AppendEvent(nil, &Event{Kind: KindClose, Key: key, ID: "n.1", Code: 1000, Reason: "r"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEvent(b)
		if err != nil {
			return
		}
		if again := AppendEvent(nil, &e); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
	})
}

func FuzzReply(f *testing.F) {
	f.Add(AppendReply(nil, &Reply{AttributesSet: true, Attributes: []byte("{}"), Actions: []Action{{Op: OpSend, Data: []byte("x")}}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeReply(b)
		if err != nil || len(b) == 0 {
			return
		}
		if again := AppendReply(nil, &r); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
	})
}

func FuzzMessage(f *testing.F) {
	f.Add(AppendMessage(nil, &Message{Op: MsgPublish, Target: "room", Data: []byte("x")}))
	f.Add(AppendMessage(nil, &Message{Op: MsgClose, Target: "n.1", Code: 1000}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			return
		}
		if again := AppendMessage(nil, &m); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
	})
}

// vector is one golden event or reply, shared with the PHP suite
// (php/tests/WebSocketEventsTest.php reads testdata/websocket/vectors.json).
type vector struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"` // event | reply
	Hex   string `json:"hex"`
	Event *Event `json:"event,omitempty"`
	Reply *Reply `json:"reply,omitempty"`
}

// TestVectors checks the golden vectors decode to what they say; UPDATE=1 rewrites them.
func TestVectors(t *testing.T) {
	want := []vector{
		{Name: "open", Kind: "event", Event: &Event{Kind: KindOpen, Key: key, ID: "ab12.1"}},
		{Name: "text message with attributes", Kind: "event", Event: &Event{Kind: KindMessage, Key: key, ID: "ab12.2",
			Attributes: []byte(`{"user":"ann","n":3}`), Data: []byte("héllo")}},
		{Name: "binary message", Kind: "event", Event: &Event{Kind: KindMessage, Binary: true, Key: key, ID: "ab12.3", Data: []byte{0, 0xff, 0x80}}},
		{Name: "close", Kind: "event", Event: &Event{Kind: KindClose, Key: key, ID: "ab12.4", Code: 1006, Attributes: []byte(`{}`), Reason: "gone"}},
		{Name: "empty reply", Kind: "reply", Reply: &Reply{Attributes: []byte{}}},
		{Name: "attributes and every action", Kind: "reply", Reply: &Reply{AttributesSet: true, Attributes: []byte(`{"user":"ann"}`),
			Actions: []Action{{Op: OpSend, Data: []byte("hi")}, {Op: OpSend, Binary: true, Data: []byte{1, 2}},
				{Op: OpJoin, Data: []byte("room:1")}, {Op: OpLeave, Data: []byte("room:1")}, {Op: OpClose, Code: 4001, Data: []byte("bye")}}}},
	}
	for i := range want {
		if want[i].Event != nil {
			want[i].Hex = hex.EncodeToString(AppendEvent(nil, want[i].Event))
		} else {
			want[i].Hex = hex.EncodeToString(AppendReply(nil, want[i].Reply))
		}
	}
	const path = "../../testdata/websocket/vectors.json"
	if os.Getenv("UPDATE") == "1" {
		b, _ := json.MarshalIndent(want, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []vector
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d vectors, want %d (UPDATE=1 rewrites them)", len(got), len(want))
	}
	for i, v := range got {
		raw, _ := hex.DecodeString(v.Hex)
		if v.Hex != want[i].Hex {
			t.Errorf("%s: hex %s, want %s", v.Name, v.Hex, want[i].Hex)
		}
		if v.Kind == "event" {
			e, err := DecodeEvent(raw)
			if err != nil || e.ID != want[i].Event.ID {
				t.Errorf("%s: %+v %v", v.Name, e, err)
			}
		} else if _, err := DecodeReply(raw); err != nil {
			t.Errorf("%s: %v", v.Name, err)
		}
	}
}
