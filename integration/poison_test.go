//go:build poison

package integration

// Under `go test -tags poison` the binary under test is a poison build too: every buffer the
// server releases is overwritten first (worker.Poisoned), so a reader that outlives the owner of
// a request's bytes reads poison, and the test that checks the bytes fails.
func init() {
	buildFlags = append(buildFlags, "-tags=poison")
}
