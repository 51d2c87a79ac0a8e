package rdma

import (
	"testing"
	"time"
)

func TestSpinDefaults(t *testing.T) {
	for _, tc := range []struct {
		soft           bool
		spin, waitSpin time.Duration
	}{
		{false, defaultSpin, defaultWaitSpin},
		{true, -1, softWaitSpin},
	} {
		var c Config
		c.setDefaults()
		c.setSpinDefaults(tc.soft)
		if c.Spin != tc.spin || c.WaitSpin != tc.waitSpin {
			t.Errorf("soft=%v: Spin %v WaitSpin %v, want %v %v", tc.soft, c.Spin, c.WaitSpin, tc.spin, tc.waitSpin)
		}
	}
	// Explicit values win on any device, "never" (negative) included.
	c := Config{WaitSpin: -1, Spin: time.Millisecond}
	c.setDefaults()
	c.setSpinDefaults(true)
	if c.WaitSpin != -1 || c.Spin != time.Millisecond {
		t.Errorf("never and 1ms: Spin %v WaitSpin %v, want 1ms -1", c.Spin, c.WaitSpin)
	}
	c = Config{WaitSpin: 5 * time.Millisecond, Spin: 3 * time.Microsecond}
	c.setDefaults()
	c.setSpinDefaults(true)
	if c.WaitSpin != 5*time.Millisecond || c.Spin != 3*time.Microsecond {
		t.Errorf("explicit: Spin %v WaitSpin %v", c.Spin, c.WaitSpin)
	}
}
