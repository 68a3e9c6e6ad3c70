package compress

import (
	"io"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// encoder is what the three codings' writers have in common.
type encoder interface {
	io.WriteCloser
	Flush() error
	Reset(w io.Writer)
}

// Levels chosen for compressing on the fly, where speed matters as much as size: gzip 5,
// brotli 4 with a 512 KiB window, zstd's default speed (about level 3) with a 1 MiB window,
// one goroutine per encoder.
var (
	gzipPool = sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(io.Discard, 5)
		return w
	}}
	brotliPool = sync.Pool{New: func() any {
		return brotli.NewWriterOptions(io.Discard, brotli.WriterOptions{Quality: 4, LGWin: 19})
	}}
	zstdPool = sync.Pool{New: func() any {
		w, err := zstd.NewWriter(io.Discard,
			zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(1<<20),
			zstd.WithLowerEncoderMem(true),
			zstd.WithZeroFrames(true)) // an empty body is still a valid frame
		if err != nil {
			panic("compress: zstd options: " + err.Error()) // the options above are constant
		}
		return w
	}}
)

func pool(coding string) *sync.Pool {
	switch coding {
	case "zstd":
		return &zstdPool
	case "br":
		return &brotliPool
	default:
		return &gzipPool
	}
}

// getEncoder returns a pooled encoder for coding writing to w.
func getEncoder(coding string, w io.Writer) encoder {
	e := pool(coding).Get().(encoder)
	e.Reset(w)
	return e
}

// putEncoder returns a closed encoder to its pool, dropping its reference to the response.
func putEncoder(coding string, e encoder) {
	e.Reset(io.Discard)
	pool(coding).Put(e)
}
