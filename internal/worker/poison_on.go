//go:build poison

package worker

// Poisoned: this is a poison build (poison_off.go says what that is).
const Poisoned = true

// Poison overwrites b, up to its capacity, with PoisonByte.
func Poison(b []byte) {
	b = b[:cap(b)]
	for i := range b {
		b[i] = PoisonByte
	}
}
