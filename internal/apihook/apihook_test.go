package apihook

import "testing"

// A function comes back under its own type, and only under it.
func TestSetGet(t *testing.T) {
	Set(func(a, b int) int { return a + b })
	if got := Get[func(int, int) int]()(2, 3); got != 5 {
		t.Fatalf("the registered function returned %d, want 5", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Get of a type never registered did not panic")
		}
	}()
	Get[func(string) string]()
}
