package sparse

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Small assertion helpers: the tests need nothing more.

func noErr(t testing.TB, err error, msg ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v %v", err, msg)
	}
}

func errIs(t testing.TB, err, target error, msg ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v is not %v %v", err, target, msg)
	}
}

func errHas(t testing.TB, err error, sub string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), sub) {
		t.Fatalf("error %v does not contain %q", err, sub)
	}
}

func equal(t testing.TB, want, got any, msg ...any) {
	t.Helper()
	w, g := reflect.ValueOf(want), reflect.ValueOf(got)
	if w.Kind() == reflect.Slice && g.Kind() == reflect.Slice && w.Len() == 0 && g.Len() == 0 {
		return // nil and empty slices are the same vector
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("want %v, got %v %v", want, got, msg)
	}
}

func isTrue(t testing.TB, ok bool, msg ...any) {
	t.Helper()
	if !ok {
		t.Fatalf("expected true %v", msg)
	}
}

// encoded is AppendEncode for vectors the test built valid.
func encoded[T Float](v *Vector[T], dst []byte) []byte {
	b, err := v.AppendEncode(dst)
	if err != nil {
		panic(err)
	}
	return b
}
