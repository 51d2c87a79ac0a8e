package fallback

import "testing"

func TestParseKernelRelease(t *testing.T) {
	for _, c := range []struct {
		rel          string
		major, minor int
		ok           bool
	}{
		{"6.1.0-18-amd64", 6, 1, true},
		{"5.8.0", 5, 8, true},
		{"4.19.0-27-cloud-amd64", 4, 19, true},
		{"6.18.44-fc-v782", 6, 18, true},
		{"5.15-rc1", 5, 15, true},
		{"6", 0, 0, false},
		{"", 0, 0, false},
	} {
		major, minor, ok := parseKernelRelease(c.rel)
		if ok != c.ok || ok && (major != c.major || minor != c.minor) {
			t.Errorf("parseKernelRelease(%q) = %d, %d, %v; want %d, %d, %v", c.rel, major, minor, ok, c.major, c.minor, c.ok)
		}
	}
}
