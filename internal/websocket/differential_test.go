package websocket

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	coder "github.com/coder/websocket"
)

// The differential test sends the same client bytes, after a valid upgrade, to a hub (the
// reading path the server runs: Hub.Upgrade, its gorilla.Upgrader and connection settings,
// conn.read, onMessage and onClose through a stand-in for PHP) and to a server on
// github.com/coder/websocket, and compares what each delivers: the messages (type and bytes)
// before the connection ended, and how it ended: the code of the close frame the server sent
// (the client's own code echoed, 1002 a protocol error, 1007 invalid data, 1009 too big), or,
// with none, 1006 for the input's end (1009 and 1002 where a library failed without a frame).
// Where the two differ, RFC 6455 decides; a difference that knownDifferences does not explain
// fails the test.

// diffMaxMessage is websocket.max_message_size in these tests: above the hub's read buffer, so
// a message around the limit takes several reads, and small enough for a fuzzer's inputs.
const diffMaxMessage = 4 << 10

// wsMessage is one message a server delivered.
type wsMessage struct {
	Binary bool
	Data   string
}

// wsOutcome is what one server made of a client's bytes.
type wsOutcome struct {
	msgs []wsMessage
	end  int // see the comment at the top
}

func (o wsOutcome) String() string {
	var b strings.Builder
	for _, m := range o.msgs {
		kind := "text"
		if m.Binary {
			kind = "binary"
		}
		d := m.Data
		if len(d) > 40 {
			d = fmt.Sprintf("%s...(%d bytes)", d[:40], len(d))
		}
		fmt.Fprintf(&b, "%s %q, ", kind, d)
	}
	fmt.Fprintf(&b, "end %d", o.end)
	return b.String()
}

// diffOptions are the hub's options in the differential test.
var diffOptions = Options{MaxMessageSize: diffMaxMessage}

// runHub sends in to a hub with diffOptions.
func runHub(t testing.TB, in []byte) wsOutcome {
	t.Helper()
	php := newFakePHP()
	h, err := New(t.Context(), php, diffOptions)
	if err != nil {
		t.Fatal(err)
	}
	s := startWireServer(hubHandler(h))
	defer s.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wireDeadline)
	defer cancel()
	defer h.Close(ctx)
	sc, err := s.exchange(in, false)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-php.closed:
	case <-ctx.Done():
		t.Fatal("onClose did not run within", wireDeadline)
	}
	var o wsOutcome
	closeCode := 0
	for _, e := range php.seen() {
		switch e.Kind {
		case KindMessage:
			o.msgs = append(o.msgs, wsMessage{Binary: e.Binary, Data: string(e.Data)})
		case KindClose:
			closeCode = int(e.Code)
		}
	}
	if o.end = serverClose(sc.written()); o.end == 0 {
		o.end = closeCode // 1006, or 1009 for a length gorilla refused without a close frame
	}
	return o
}

// runCoder sends in to a server on coder/websocket that reads messages as the hub does, with
// the hub's limit: diffOptions as New completes them.
func runCoder(t testing.TB, in []byte) wsOutcome {
	t.Helper()
	h, err := New(t.Context(), nil, diffOptions)
	if err != nil {
		t.Fatal(err)
	}
	h.Close(context.Background())
	var o wsOutcome
	var readErr error
	done := make(chan struct{})
	s := startWireServer(func(w http.ResponseWriter, r *http.Request) {
		c, err := coder.Accept(w, r, &coder.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return // Accept answered the client, which sees no 101
		}
		defer close(done)
		defer c.CloseNow()
		c.SetReadLimit(h.opts.MaxMessageSize)
		ctx, cancel := context.WithTimeout(context.Background(), wireDeadline)
		defer cancel()
		for {
			typ, data, err := c.Read(ctx)
			if err != nil {
				readErr = err
				return
			}
			o.msgs = append(o.msgs, wsMessage{Binary: typ == coder.MessageBinary, Data: string(data)})
		}
	})
	defer s.srv.Close()
	sc, err := s.exchange(in, false)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(wireDeadline):
		t.Fatal("the coder/websocket server did not end within", wireDeadline)
	}
	if o.end = serverClose(sc.written()); o.end == 0 {
		o.end = int(coder.StatusAbnormalClosure)
		if !errors.Is(readErr, io.EOF) && !errors.Is(readErr, io.ErrUnexpectedEOF) {
			// an unmasked frame, a negative length: refused without a close frame
			o.end = int(coder.StatusProtocolError)
		}
	}
	return o
}

// clientFrame is one frame of a client's bytes as RFC 6455 5.2 lays it out.
type clientFrame struct {
	fin       bool
	op        byte
	lenField  byte   // the 7-bit length: 126 and 127 say an extended length follows
	declared  uint64 // the length the frame declares
	payload   []byte // unmasked; shorter than declared when the bytes end first
	extLenMSB bool   // a 64-bit length with its top bit set
	rsv       byte   // the RSV bits
	masked    bool
	cutHeader bool // the bytes end within its header
}

// badStart reports whether a frame's first two bytes break RFC 6455 5.2-5.5 where no extension
// was agreed: an RSV bit, an unknown opcode, no mask from a client, a control frame fragmented
// or longer than 125 bytes, or a data frame out of its message's order (inMessage: a
// fragmented message was begun and not ended).
func (f clientFrame) badStart(inMessage bool) bool {
	switch {
	case f.rsv != 0 || !f.masked:
		return true
	case f.op >= 0x8:
		return f.op > 0xa || !f.fin || f.lenField > 125
	case f.op == 0x0:
		return !inMessage
	default:
		return f.op > 0x2 || inMessage
	}
}

// clientFrames splits in into frames, the last cut short where in ends.
func clientFrames(in []byte) []clientFrame {
	var fs []clientFrame
	for len(in) >= 2 {
		f := clientFrame{fin: in[0]&0x80 != 0, rsv: in[0] & 0x70, op: in[0] & 0xf, lenField: in[1] & 0x7f, masked: in[1]&0x80 != 0}
		in = in[2:]
		f.cutHeader = true // until the header is read whole
		f.declared = uint64(f.lenField)
		switch f.lenField {
		case 126:
			if len(in) < 2 {
				return append(fs, f)
			}
			f.declared, in = uint64(binary.BigEndian.Uint16(in)), in[2:]
		case 127:
			if len(in) < 8 {
				return append(fs, f)
			}
			f.declared, in = binary.BigEndian.Uint64(in), in[8:]
			f.extLenMSB = f.declared>>63 != 0
		}
		var key []byte
		if f.masked {
			if len(in) < 4 {
				return append(fs, f)
			}
			key, in = in[:4], in[4:]
		}
		f.cutHeader = false
		n := min(f.declared, uint64(len(in)))
		f.payload = bytes.Clone(in[:n])
		in = in[n:]
		for i := range f.payload {
			if key != nil {
				f.payload[i] ^= key[i%4]
			}
		}
		fs = append(fs, f)
	}
	return fs // a last byte alone is no header gorilla reads
}

// partialMessage returns the message the client's bytes end within, as far as they go: a
// data frame's payload cut short, or fragments begun and not ended.
func partialMessage(fs []clientFrame) (wsMessage, bool) {
	var m wsMessage
	inMessage := false
	for _, f := range fs {
		if f.cutHeader {
			return m, inMessage
		}
		if f.badStart(inMessage) {
			return m, false // the connection fails at this frame
		}
		switch f.op {
		case 0x1, 0x2:
			m = wsMessage{Binary: f.op == 0x2, Data: string(f.payload)}
		case 0x0:
			m.Data += string(f.payload)
		default:
			continue
		}
		if uint64(len(f.payload)) < f.declared {
			return m, true
		}
		inMessage = !f.fin
	}
	return m, inMessage
}

// refusedAtCutHeader reports whether the client's bytes end within the header of a frame
// whose first two bytes are already wrong (badStart).
func refusedAtCutHeader(fs []clientFrame) bool {
	inMessage := false
	for _, f := range fs {
		if f.cutHeader {
			return f.badStart(inMessage)
		}
		if f.badStart(inMessage) {
			return false // the connection failed here, with the header whole
		}
		if f.op < 0x8 {
			inMessage = !f.fin
		}
	}
	return false
}

// firstClose returns the client's first close frame, if any.
func firstClose(fs []clientFrame) (clientFrame, bool) {
	for _, f := range fs {
		if f.op == 0x8 {
			return f, true
		}
	}
	return clientFrame{}, false
}

// A known difference: the hub and coder/websocket end differently, for the reason given.
// applies is given the client's frames and both outcomes; it must hold only for the shape of
// that difference, so that any other disagreement fails.
type knownDifference struct {
	name, reason string
	applies      func(fs []clientFrame, hub, ref wsOutcome) bool
	// strip, instead of applies, takes a difference that adds to others out of coder's
	// outcome, and reports whether it did.
	strip func(fs []clientFrame, ref wsOutcome) (wsOutcome, bool)
}

// sameMessages reports whether the two delivered the same messages.
func sameMessages(a, b wsOutcome) bool { return slices.Equal(a.msgs, b.msgs) }

// stoppedBefore reports whether the hub delivered a prefix of ref's messages and ref's next one
// satisfies next.
func stoppedBefore(hub, ref wsOutcome, next func(wsMessage) bool) bool {
	n := len(hub.msgs)
	return n < len(ref.msgs) && slices.Equal(hub.msgs, ref.msgs[:n]) && next(ref.msgs[n])
}

var knownDifferences = []knownDifference{
	{"text not UTF-8", "a text message that is not UTF-8 fails the connection with 1007 (RFC 6455 8.1: MUST fail; 5.6: text is UTF-8); coder/websocket does not check and delivers it",
		func(_ []clientFrame, hub, ref wsOutcome) bool {
			return hub.end == int(coder.StatusInvalidFramePayloadData) &&
				stoppedBefore(hub, ref, func(m wsMessage) bool { return !m.Binary && !utf8.ValidString(m.Data) })
		}, nil},
	{"close reason not UTF-8", "a close frame whose reason is not UTF-8 fails the connection (gorilla: 1002; RFC 6455 5.5.1 and 8.1: the reason is UTF-8, MUST fail); coder/websocket does not check and echoes the client's code",
		func(fs []clientFrame, hub, ref wsOutcome) bool {
			f, ok := firstClose(fs)
			return ok && len(f.payload) >= 2 && !utf8.Valid(f.payload[2:]) && sameMessages(hub, ref) &&
				hub.end == int(coder.StatusProtocolError) && ref.end == int(binary.BigEndian.Uint16(f.payload))
		}, nil},
	{"close code 1014", "gorilla refuses the close code 1014 (Bad Gateway, registered with IANA after RFC 6455) with 1002; coder/websocket takes it; RFC 6455 7.4.2 reserves 1000-2999 to the protocol and leaves receiving one open",
		func(fs []clientFrame, hub, ref wsOutcome) bool {
			f, ok := firstClose(fs)
			return ok && len(f.payload) >= 2 && binary.BigEndian.Uint16(f.payload) == 1014 && sameMessages(hub, ref) &&
				hub.end == int(coder.StatusProtocolError) && ref.end == 1014
		}, nil},
	{"close body of one byte", "gorilla takes a close frame with a 1-byte body for one without a code (1005) and closes normally; RFC 6455 5.5.1 (a body starts with a 2-byte code) backs coder/websocket's 1002. Fixing it needs gorilla's frame reader; the connection ends either way with nothing delivered, and PHP's onClose gets 1005",
		func(fs []clientFrame, hub, ref wsOutcome) bool {
			f, ok := firstClose(fs)
			return ok && len(f.payload) == 1 && sameMessages(hub, ref) &&
				hub.end == int(coder.StatusNoStatusRcvd) && ref.end == int(coder.StatusProtocolError)
		}, nil},
	{"control frame with an extended length", "a control frame whose 7-bit length is 126 or 127 fails with 1002 (gorilla checks the 7-bit field: RFC 6455 5.5, control payloads are at most 125 bytes, and 5.2, lengths are minimal); coder/websocket reads the extended length and takes it when it is at most 125",
		func(fs []clientFrame, hub, ref wsOutcome) bool {
			return slices.ContainsFunc(fs, func(f clientFrame) bool { return f.op >= 0x8 && f.lenField >= 126 && f.declared <= 125 }) &&
				hub.end == int(coder.StatusProtocolError) &&
				len(hub.msgs) <= len(ref.msgs) && slices.Equal(hub.msgs, ref.msgs[:len(hub.msgs)])
		}, nil},
	{"64-bit length with its top bit set", "gorilla takes a length of 2^63 or more for one past any limit (1009, without a close frame); coder/websocket for a protocol error (RFC 6455 5.2: the top bit MUST be 0). Both fail the connection at that frame's header",
		func(fs []clientFrame, hub, ref wsOutcome) bool {
			return slices.ContainsFunc(fs, func(f clientFrame) bool { return f.extLenMSB }) && sameMessages(hub, ref) &&
				hub.end == int(coder.StatusMessageTooBig) && ref.end == int(coder.StatusProtocolError)
		}, nil},
	{"header cut short after a bad start", "gorilla checks a frame's first two bytes before it reads the rest of its header and fails with 1002; coder/websocket reads the whole header first, so where the bytes end within it, it sees their end (1006). Both fail a whole header alike",
		func(fs []clientFrame, hub, ref wsOutcome) bool {
			return refusedAtCutHeader(fs) && sameMessages(hub, ref) &&
				hub.end == int(coder.StatusProtocolError) && ref.end == int(coder.StatusAbnormalClosure)
		}, nil},
	{name: "message cut short by the end", reason: "where the bytes end within a message, at the start of one of coder/websocket's reads (of a payload, or of the next fragment's header), it delivers what came as a whole message: it takes the io.EOF of that read for the message's end (and its next read fails with \"previous message not read to completion\", no close frame). A message is whole only at its last frame's end (RFC 6455 5.4, 6.2); the hub delivers none of it. Taken out of coder/websocket's outcome before the rest is compared, since it adds to any other difference",
		strip: func(fs []clientFrame, ref wsOutcome) (wsOutcome, bool) {
			m, ok := partialMessage(fs)
			if !ok || len(ref.msgs) == 0 || ref.msgs[len(ref.msgs)-1] != m ||
				ref.end != int(coder.StatusAbnormalClosure) && ref.end != int(coder.StatusProtocolError) {
				return ref, false
			}
			return wsOutcome{msgs: ref.msgs[:len(ref.msgs)-1], end: int(coder.StatusAbnormalClosure)}, true
		}},
	{"declared length past the limit", "a message whose frames declare more than max_message_size fails with 1009 at the header (gorilla); coder/websocket reads up to the limit first, so where the bytes end before, it sees their end (1006). RFC 6455 10.4 leaves limits to the endpoint",
		func(fs []clientFrame, hub, ref wsOutcome) bool {
			var total uint64
			over := false
			for _, f := range fs {
				switch {
				case f.op == 0x1 || f.op == 0x2:
					total = f.declared
				case f.op == 0x0:
					total += f.declared
				}
				over = over || total > diffMaxMessage
			}
			return over && sameMessages(hub, ref) && hub.end == int(coder.StatusMessageTooBig) && ref.end == int(coder.StatusAbnormalClosure)
		}, nil},
}

// compareWS returns "" when the hub and coder/websocket agree, the known difference that
// explains where they do not, or an error when none does.
func compareWS(in []byte, hub, ref wsOutcome) (string, error) {
	if sameMessages(hub, ref) && hub.end == ref.end {
		return "", nil
	}
	fs := clientFrames(in)
	orig := ref
	var names []string
	for _, d := range knownDifferences {
		if d.strip == nil {
			continue
		}
		if r, ok := d.strip(fs, ref); ok {
			ref = r
			names = append(names, d.name)
		}
	}
	if sameMessages(hub, ref) && hub.end == ref.end && len(names) > 0 {
		return strings.Join(names, " + "), nil
	}
	for _, d := range knownDifferences {
		if d.applies != nil && d.applies(fs, hub, ref) {
			return strings.Join(append(names, d.name), " + "), nil
		}
	}
	return "", fmt.Errorf("the hub and coder/websocket differ, and no known difference explains it:\ninput %q\nhub:   %v\ncoder: %v", in, hub, orig)
}

// Building client frames.

var testMask = [4]byte{0x37, 0xfa, 0x21, 0x3d}

// wsFrame returns a frame: b0 is its first byte (FIN, RSV, opcode); form is 0 for the shortest
// length, 2 or 8 for the 16- or 64-bit form whatever the length.
func wsFrame(b0 byte, masked bool, form int, payload []byte) []byte {
	return wsFrameLen(b0, masked, form, uint64(len(payload)), payload)
}

// wsFrameLen is wsFrame with a declared length that need not be the payload's.
func wsFrameLen(b0 byte, masked bool, form int, n uint64, payload []byte) []byte {
	var mbit byte
	if masked {
		mbit = 0x80
	}
	b := []byte{b0}
	switch {
	case form == 8 || form == 0 && n > 0xffff:
		b = binary.BigEndian.AppendUint64(append(b, mbit|127), n)
	case form == 2 || form == 0 && n > 125:
		b = binary.BigEndian.AppendUint16(append(b, mbit|126), uint16(n))
	default:
		b = append(b, mbit|byte(n))
	}
	if !masked {
		return append(b, payload...)
	}
	b = append(b, testMask[:]...)
	for i, c := range payload {
		b = append(b, c^testMask[i%4])
	}
	return b
}

const (
	finBit                     = 0x80
	opCont, opText, opBin      = 0x0, 0x1, 0x2
	opClose, opPing, opPong    = 0x8, 0x9, 0xa
	rsv1, rsv2, rsv3           = 0x40, 0x20, 0x10
	maskedFrame, unmaskedFrame = true, false
	shortest, len16, len64     = 0, 2, 8
	invalidUTF8s               = "\xff\xfe"
)

func text(s string) []byte   { return wsFrame(finBit|opText, maskedFrame, shortest, []byte(s)) }
func binMsg(s string) []byte { return wsFrame(finBit|opBin, maskedFrame, shortest, []byte(s)) }
func ping(s string) []byte   { return wsFrame(finBit|opPing, maskedFrame, shortest, []byte(s)) }

func closeBody(code int, reason string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(code)), reason...)
}

func closeFrame(code int, reason string) []byte {
	return wsFrame(finBit|opClose, maskedFrame, shortest, closeBody(code, reason))
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// wsCases are the seed corpus: want is "" where both must agree, else the known difference
// that must explain the disagreement.
var wsCases = []struct {
	name string
	in   []byte
	want string
}{
	// Agreement on what is well formed.
	{"text", cat(text("hello"), closeFrame(1000, "bye")), ""},
	{"binary", cat(binMsg("\x00\x01\xff"), closeFrame(1000, "")), ""},
	{"empty messages", cat(text(""), binMsg(""), closeFrame(1001, "")), ""},
	{"no close frame", cat(text("a"), text("b")), ""},
	{"cut short in a header", append(text("a"), 0x81), ""},
	{"cut short in a payload", text("abcdef")[:8], ""},
	{"fragmented", cat(wsFrame(opText, maskedFrame, shortest, []byte("hel")), wsFrame(opCont, maskedFrame, shortest, []byte("l")),
		wsFrame(finBit|opCont, maskedFrame, shortest, []byte("o")), closeFrame(1000, "")), ""},
	{"fragmented binary of empty frames", cat(wsFrame(opBin, maskedFrame, shortest, nil), wsFrame(finBit|opCont, maskedFrame, shortest, nil)), ""},
	{"ping inside fragments", cat(wsFrame(opText, maskedFrame, shortest, []byte("a")), ping("p"),
		wsFrame(finBit|opCont, maskedFrame, shortest, []byte("b"))), ""},
	{"pong inside fragments", cat(wsFrame(opBin, maskedFrame, shortest, []byte("a")), wsFrame(finBit|opPong, maskedFrame, shortest, []byte("x")),
		wsFrame(finBit|opCont, maskedFrame, shortest, []byte("b"))), ""},
	{"close inside fragments", cat(wsFrame(opText, maskedFrame, shortest, []byte("a")), closeFrame(1000, ""), wsFrame(finBit|opCont, maskedFrame, shortest, []byte("b"))), ""},
	{"ping of 125 bytes", cat(ping(strings.Repeat("p", 125)), text("after")), ""},
	{"16-bit length, minimal", cat(text(strings.Repeat("x", 126)), closeFrame(1000, "")), ""},
	{"64-bit length, minimal", cat(wsFrame(finBit|opBin, maskedFrame, shortest, bytes.Repeat([]byte("y"), 0x10000)), closeFrame(1000, "")), ""},
	{"16-bit length, not minimal", cat(wsFrame(finBit|opText, maskedFrame, len16, []byte("abc")), closeFrame(1000, "")), ""},
	{"64-bit length, not minimal", cat(wsFrame(finBit|opText, maskedFrame, len64, []byte("abc")), closeFrame(1000, "")), ""},
	{"valid UTF-8, 4-byte sequences", cat(text("h\u00e9llo \U0001F600"), closeFrame(1000, "\u00e9")), ""},
	{"UTF-8 split across fragments", cat(wsFrame(opText, maskedFrame, shortest, []byte("\xf0\x9f")), wsFrame(finBit|opCont, maskedFrame, shortest, []byte("\x98\x80"))), ""},
	{"binary not UTF-8", cat(binMsg(invalidUTF8s), closeFrame(1000, "")), ""},

	// Protocol errors: 1002 from both.
	{"unmasked frame", cat(text("a"), wsFrame(finBit|opText, unmaskedFrame, shortest, []byte("b")), text("c")), ""},
	{"unmasked close", wsFrame(finBit|opClose, unmaskedFrame, shortest, closeBody(1000, "")), ""},
	{"RSV1 without an extension", cat(text("a"), wsFrame(finBit|rsv1|opText, maskedFrame, shortest, []byte("b"))), ""},
	{"RSV2", wsFrame(finBit|rsv2|opBin, maskedFrame, shortest, []byte("b")), ""},
	{"RSV3 on a ping", wsFrame(finBit|rsv3|opPing, maskedFrame, shortest, nil), ""},
	{"opcode 3", cat(text("a"), wsFrame(finBit|0x3, maskedFrame, shortest, []byte("x"))), ""},
	{"opcode 7", wsFrame(finBit|0x7, maskedFrame, shortest, nil), ""},
	{"opcode 11", wsFrame(finBit|0xb, maskedFrame, shortest, nil), ""},
	{"opcode 15", wsFrame(finBit|0xf, maskedFrame, shortest, []byte("x")), ""},
	{"continuation first", cat(wsFrame(finBit|opCont, maskedFrame, shortest, []byte("x")), text("a")), ""},
	{"text inside fragments", cat(wsFrame(opText, maskedFrame, shortest, []byte("a")), text("b")), ""},
	{"fragmented ping", wsFrame(opPing, maskedFrame, shortest, []byte("p")), ""},
	{"ping of 126 bytes", wsFrame(finBit|opPing, maskedFrame, shortest, bytes.Repeat([]byte("p"), 126)), ""},
	{"close of 126 bytes", wsFrame(finBit|opClose, maskedFrame, shortest, closeBody(1000, strings.Repeat("r", 124))), ""},
	{"ping with a 64-bit length of 2^16", wsFrameLen(finBit|opPing, maskedFrame, len64, 1<<16, nil), ""},

	// Close codes.
	{"close without a body", cat(text("a"), wsFrame(finBit|opClose, maskedFrame, shortest, nil)), ""},
	{"close 1001", closeFrame(1001, "going"), ""},
	{"close 1002", closeFrame(1002, ""), ""},
	{"close 1003", closeFrame(1003, ""), ""},
	{"close 1007", closeFrame(1007, ""), ""},
	{"close 1011", closeFrame(1011, ""), ""},
	{"close 1012", closeFrame(1012, ""), ""},
	{"close 1013", closeFrame(1013, ""), ""},
	{"close 3000", closeFrame(3000, ""), ""},
	{"close 4999", closeFrame(4999, ""), ""},
	{"close 0", closeFrame(0, ""), ""},
	{"close 999", closeFrame(999, ""), ""},
	{"close 1004", closeFrame(1004, ""), ""},
	{"close 1005", closeFrame(1005, ""), ""},
	{"close 1006", closeFrame(1006, ""), ""},
	{"close 1015", closeFrame(1015, ""), ""},
	{"close 1016", closeFrame(1016, ""), ""},
	{"close 2999", closeFrame(2999, ""), ""},
	{"close 5000", closeFrame(5000, ""), ""},
	{"close 65535", closeFrame(65535, ""), ""},
	{"close 1014", closeFrame(1014, ""), "close code 1014"},
	{"close with a body of one byte", cat(text("a"), wsFrame(finBit|opClose, maskedFrame, shortest, []byte{0x03})), "close body of one byte"},
	{"close reason not UTF-8", cat(text("a"), closeFrame(1000, "bye"+invalidUTF8s)), "close reason not UTF-8"},
	{"close reason with a surrogate", closeFrame(1000, "\xed\xa0\x80"), "close reason not UTF-8"},

	// Text that is not UTF-8: the hub fails the connection (1007).
	{"text not UTF-8", cat(text("ok"), text("a"+invalidUTF8s), text("after")), "text not UTF-8"},
	{"text with a surrogate", text("\xed\xa0\x80"), "text not UTF-8"},
	{"text with an overlong encoding", text("\xc0\xaf"), "text not UTF-8"},
	{"text past U+10FFFF", text("\xf4\x90\x80\x80"), "text not UTF-8"},
	{"text cut in a sequence", cat(text("\xe2\x82"), closeFrame(1000, "")), "text not UTF-8"},
	{"fragmented text not UTF-8", cat(wsFrame(opText, maskedFrame, shortest, []byte("ok")), wsFrame(finBit|opCont, maskedFrame, shortest, []byte("\x80"))), "text not UTF-8"},

	// Lengths.
	{"control frame with a 16-bit length", cat(text("a"), wsFrame(finBit|opPing, maskedFrame, len16, []byte("p")), text("b")), "control frame with an extended length"},
	{"close with a 64-bit length", wsFrame(finBit|opClose, maskedFrame, len64, closeBody(1000, "")), "control frame with an extended length"},
	{"64-bit length 2^63", cat(text("a"), wsFrameLen(finBit|opBin, maskedFrame, len64, 1<<63, []byte("x"))), "64-bit length with its top bit set"},
	{"64-bit length 2^64-1", wsFrameLen(finBit|opText, maskedFrame, len64, 1<<64-1, nil), "64-bit length with its top bit set"},
	{"64-bit length 2^63-1", wsFrameLen(finBit|opText, maskedFrame, len64, 1<<63-1, []byte("x")), "declared length past the limit"},
	{"64-bit length 2^32", cat(text("a"), wsFrameLen(finBit|opBin, maskedFrame, len64, 1<<32, []byte("x"))), "declared length past the limit"},

	// Around max_message_size.
	{"message of the limit", cat(binMsg(strings.Repeat("m", diffMaxMessage)), closeFrame(1000, "")), ""},
	{"message of the limit less one", cat(text(strings.Repeat("m", diffMaxMessage-1)), closeFrame(1000, "")), ""},
	{"message of the limit plus one", cat(text("a"), binMsg(strings.Repeat("m", diffMaxMessage+1)), text("b")), ""},
	{"fragments of the limit", cat(wsFrame(opText, maskedFrame, shortest, bytes.Repeat([]byte("m"), diffMaxMessage/2)),
		ping("x"), wsFrame(finBit|opCont, maskedFrame, shortest, bytes.Repeat([]byte("m"), diffMaxMessage/2)), closeFrame(1000, "")), ""},
	{"fragments past the limit", cat(wsFrame(opBin, maskedFrame, shortest, bytes.Repeat([]byte("m"), diffMaxMessage)),
		wsFrame(finBit|opCont, maskedFrame, shortest, []byte("m"))), ""},
	{"past the limit, cut short", wsFrameLen(finBit|opBin, maskedFrame, shortest, diffMaxMessage+1, []byte("m")), "declared length past the limit"},
	{"fragments past the limit, cut short", cat(wsFrame(opBin, maskedFrame, shortest, bytes.Repeat([]byte("m"), 10)),
		wsFrameLen(finBit|opCont, maskedFrame, shortest, diffMaxMessage, []byte("m"))), "declared length past the limit"},
	{"bad RSV in a header cut short", []byte("0\x83"), "header cut short after a bad start"},
	{"unmasked, cut in its length", append(text("a"), 0x81, 126, 0), "header cut short after a bad start"},
	{"ping of 126 bytes, cut in its mask", wsFrame(finBit|opPing, maskedFrame, shortest, bytes.Repeat([]byte("p"), 126))[:4], "header cut short after a bad start"},
	{"masked, cut in its mask", text("abc")[:4], ""},
	{"cut short before a payload", cat(text("a"), wsFrameLen(finBit|opText, maskedFrame, shortest, 13, nil)), "message cut short by the end"},
	{"cut short between fragments", cat(wsFrame(opBin, maskedFrame, shortest, []byte("ab")), wsFrameLen(finBit|opCont, maskedFrame, shortest, 5, nil)), "message cut short by the end"},
	{"cut short after a first fragment", cat(text("a"), wsFrame(opBin, maskedFrame, shortest, nil)), "message cut short by the end"},
	{"cut short after a ping inside fragments", cat(wsFrame(opText, maskedFrame, shortest, []byte("ab")), ping("p")), "message cut short by the end"},
	{"cut short in a bad header inside fragments", cat(wsFrame(opBin, maskedFrame, shortest, []byte("a")), []byte{rsv2 | opCont, 0x80 | 127}), "message cut short by the end + header cut short after a bad start"},
	{"cut short after a declared length past the limit", wsFrameLen(finBit|opText, maskedFrame, len16, diffMaxMessage+100, nil), "message cut short by the end + declared length past the limit"},
	{"many small messages", bytes.Repeat(text("s"), 300), ""},
}

func TestDifferentialWithCoder(t *testing.T) {
	names := map[string]bool{}
	for _, d := range knownDifferences {
		names[d.name] = true
	}
	for _, tc := range wsCases {
		t.Run(tc.name, func(t *testing.T) {
			for name := range strings.SplitSeq(tc.want, " + ") {
				if tc.want != "" && !names[name] {
					t.Fatalf("no known difference named %q", name)
				}
			}
			if false {
				t.Fatalf("no known difference named %q", tc.want)
			}
			hub, ref := runHub(t, tc.in), runCoder(t, tc.in)
			got, err := compareWS(tc.in, hub, ref)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("explained by %q, want %q:\nhub:   %v\ncoder: %v", got, tc.want, hub, ref)
			}
		})
	}
}

// FuzzDifferential: for any client bytes after an upgrade, the hub delivers what
// coder/websocket delivers and ends as it does, but for a known difference.
func FuzzDifferential(f *testing.F) {
	for _, tc := range wsCases {
		if len(tc.in) <= 16<<10 {
			f.Add(tc.in)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 64<<10 {
			return
		}
		if _, err := compareWS(in, runHub(t, in), runCoder(t, in)); err != nil {
			t.Fatal(err)
		}
	})
}
