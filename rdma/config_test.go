package rdma

import (
	"testing"
	"time"
)

func TestSpinDefaults(t *testing.T) {
	t.Setenv("SPARCML_RDMA_SPIN", "")
	t.Setenv("SPARCML_RDMA_WAIT_SPIN", "")
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
	// The environment and explicit values win on any device.
	t.Setenv("SPARCML_RDMA_WAIT_SPIN", "0")
	t.Setenv("SPARCML_RDMA_SPIN", "1ms")
	c := Config{}
	c.setDefaults()
	c.setSpinDefaults(true)
	if c.WaitSpin != -1 || c.Spin != time.Millisecond {
		t.Errorf("from the environment: Spin %v WaitSpin %v, want 1ms -1", c.Spin, c.WaitSpin)
	}
	c = Config{WaitSpin: 5 * time.Millisecond, Spin: 3 * time.Microsecond}
	c.setDefaults()
	c.setSpinDefaults(true)
	if c.WaitSpin != 5*time.Millisecond || c.Spin != 3*time.Microsecond {
		t.Errorf("explicit: Spin %v WaitSpin %v", c.Spin, c.WaitSpin)
	}
}
