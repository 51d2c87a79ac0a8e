package transport

import (
	"context"
	"testing"
	"time"
)

// The mark survives contexts derived from the marked one, and only those.
func TestLockedThread(t *testing.T) {
	plain := context.Background()
	marked := OnLockedThread(plain)
	derived, cancel := context.WithTimeout(marked, time.Minute)
	defer cancel()
	if LockedThread(plain) || !LockedThread(marked) || !LockedThread(derived) {
		t.Fatalf("LockedThread: plain %v, marked %v, derived %v; want false, true, true",
			LockedThread(plain), LockedThread(marked), LockedThread(derived))
	}
}
