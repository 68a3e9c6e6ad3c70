package nativetest

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRequestHead sends any head and body in a REQUEST frame to a classic-mode process: it must
// answer with well-formed frames or refuse with an ERROR frame and exit status 70, never crash.
// make fuzz-native runs it when clang (for the libFuzzer target, fuzz_decode.c) is missing.
func FuzzRequestHead(f *testing.F) {
	for _, name := range []string{"get", "file"} {
		seed, err := os.ReadFile(filepath.Join("testdata", "corpus", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(seed, []byte("a=1"))
	}
	f.Add([]byte("GET\x00/\x00/"), []byte(nil))
	f.Fuzz(func(t *testing.T, head, body []byte) {
		p := start(t, runtime)
		payload := binary.LittleEndian.AppendUint32(nil, uint32(len(head)))
		payload = append(append(payload, head...), body...)
		<-p.write(appendFrame(nil, typeRequest, 7, payload))
		first := p.readFrame(t)
		if first.Type == typeError {
			if code := p.waitExit(t); code != 70 {
				t.Fatalf("exit status %d after an ERROR frame, want 70", code)
			}
			return
		}
		p.readAnswerFrom(t, 7, first)
		p.in.Close()
		p.expectEOF(t)
		if code := p.waitExit(t); code != 0 {
			t.Fatalf("exit status %d after answering, want 0\n%s", code, p.log)
		}
	})
}
