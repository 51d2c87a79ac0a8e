package train

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparcml/sparcml/train/data"
)

// A missing data file gets the hint of the package that installs it,
// recognised by its error, not its text; other failures do not.
func TestWithHint(t *testing.T) {
	_, err := data.LoadIDX(filepath.Join(t.TempDir(), "absent.gz"), "absent-labels.gz", 10, data.Options{Size: 1})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("loading a missing file: %v", err)
	}
	if got := withHint(err); !errors.Is(got, fs.ErrNotExist) || !strings.Contains(got.Error(), "dataset-fashion-mnist") {
		t.Fatalf("withHint(%v) = %v, want the package named", err, got)
	}
	other := errors.New("bad header")
	if got := withHint(other); got != other {
		t.Fatalf("withHint(%v) = %v, want it unchanged", other, got)
	}
}
