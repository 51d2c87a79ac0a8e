package quant

import (
	"fmt"
	"strings"
)

// Kind names a value codec. The zero Kind is None.
type Kind uint8

// The value codecs. The CLI names (Kind.String, ParseKind) are
// none, fp16, bf16, q8, q4 and q2.
const (
	// None sends raw little-endian float32: 4 bytes per value, lossless.
	None Kind = iota
	// FP16 sends IEEE 754 binary16, rounded to nearest even: 2 bytes per value.
	FP16
	// BF16 sends bfloat16 (the top half of a float32), rounded to nearest
	// even: 2 bytes per value.
	BF16
	// Q8 is stochastic quantization with 8 bits per value (127 levels).
	Q8
	// Q4 is stochastic quantization with 4 bits per value (7 levels).
	Q4
	// Q2 is stochastic quantization with 2 bits per value (1 level:
	// each value becomes -scale, 0 or +scale).
	Q2
	numKinds
)

var kindNames = [numKinds]string{"none", "fp16", "bf16", "q8", "q4", "q2"}

// String returns the CLI name of k ("none", "fp16", "bf16", "q8", "q4",
// "q2"), or "kind(N)" for an unknown value.
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind returns the Kind whose CLI name is s, ignoring case and
// surrounding spaces.
func ParseKind(s string) (Kind, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for k, n := range kindNames {
		if n == name {
			return Kind(k), nil
		}
	}
	return None, fmt.Errorf("quant: unknown codec %q (want one of %s)", s, strings.Join(kindNames[:], ", "))
}

// Kinds returns every valid Kind, in order.
func Kinds() []Kind {
	return []Kind{None, FP16, BF16, Q8, Q4, Q2}
}

// Valid reports whether k is one of the defined codecs.
func (k Kind) Valid() bool { return k < numKinds }

// Bits returns the number of bits each value takes on the wire, not
// counting the per-bucket scale of the stochastic kinds; 0 for an invalid
// Kind.
func (k Kind) Bits() int {
	switch k {
	case None:
		return 32
	case FP16, BF16:
		return 16
	case Q8:
		return 8
	case Q4:
		return 4
	case Q2:
		return 2
	}
	return 0
}

// Lossless reports whether decoding returns exactly the encoded values.
func (k Kind) Lossless() bool { return k == None }

// Stochastic reports whether the codec rounds at random (and so needs a
// seed and is unbiased rather than deterministic).
func (k Kind) Stochastic() bool { return k == Q8 || k == Q4 || k == Q2 }
