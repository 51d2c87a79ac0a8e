package sparcml_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sparcml/sparcml"
)

// TestParseIndexWire: every index wire parses back from its name, in any
// case, and anything else is refused naming the value.
func TestParseIndexWire(t *testing.T) {
	for _, w := range []sparcml.IndexWire{sparcml.IndexAuto, sparcml.IndexRaw, sparcml.IndexPacked} {
		got, err := sparcml.ParseIndexWire(strings.ToUpper(w.String()))
		if err != nil || got != w {
			t.Fatalf("ParseIndexWire(%q) = %v, %v", w.String(), got, err)
		}
	}
	_, err := sparcml.ParseIndexWire("zip")
	if !errors.Is(err, sparcml.ErrInvalid) || !strings.Contains(err.Error(), `"zip"`) {
		t.Fatalf("ParseIndexWire(zip): %v", err)
	}
}
