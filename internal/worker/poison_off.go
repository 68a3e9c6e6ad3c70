//go:build !poison

package worker

// Poisoned says whether this is a poison build (go test -tags poison), in which every buffer
// the server releases is overwritten first, so that a reader that outlives its owner reads
// PoisonByte instead of another request's bytes, and a test sees it.
const Poisoned = false

// Poison overwrites b, up to its capacity, with PoisonByte in a poison build; otherwise it
// does nothing.
func Poison(b []byte) {}
