package test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A rank killed with SIGKILL at P = 4 and 8 under sparcml run
// --keep-going and SPARCML_ON_PEER_LOSS=revoke: every survivor's error
// names it, and the survivors shrink and run 100 allreduces checked
// against the sum over their seeded inputs (testprog's shrink scenario).
func TestShrinkAfterKill(t *testing.T) {
	for _, p := range []int{4, 8} {
		for _, seed := range []uint64{uint64(p) + 1, uint64(5*p) + 2, uint64(3 * p)} {
			victim := int(seed % uint64(p))
			t.Run(fmt.Sprintf("P=%d/victim=%d", p, victim), func(t *testing.T) {
				stdout, stderr, err := runCmd(t, 90*time.Second,
					[]string{"SPARCML_ON_PEER_LOSS=revoke", "SPARCML_TIMEOUT=20s", "SPARCML_CALIBRATE=0"},
					sparcmlBin, "run", "--keep-going", "-n", fmt.Sprint(p), "--timeout", "80s",
					testprogBin, "shrink", fmt.Sprint(seed))
				assert.Error(t, err, "the killed rank's status")
				assert.Contains(t, stderr, fmt.Sprintf("rank %d was killed", victim), "the launcher names the victim")
				assert.Contains(t, stderr, "the other ranks go on")
				done := regexp.MustCompile(`rank (\d+): now rank \d+ of (\d+): 100 checked allreduces`).FindAllStringSubmatch(stdout, -1)
				assert.Len(t, done, p-1, "survivors that went on\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
				for _, m := range done {
					assert.Equal(t, fmt.Sprint(p-1), m[2])
				}
				assert.Equal(t, p-1, strings.Count(stdout, fmt.Sprintf("lost rank %d:", victim)))
			})
		}
	}
}
