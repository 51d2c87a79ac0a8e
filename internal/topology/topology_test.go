package topology

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRankRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{{nil, ""}, {[]int{3}, "3"}, {[]int{1, 2, 3}, "1-3"}, {[]int{0, 2, 3, 4, 7}, "0,2-4,7"}} {
		if got := RankRanges(tc.in); got != tc.want {
			t.Errorf("RankRanges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A sub-communicator's hosts are its members' hosts, renumbered in the
// order of their lowest new rank.
func TestSubTopology(t *testing.T) {
	parent := New([]int{0, 0, 1, 1, 2, 2})
	sub := parent.Sub([]int{5, 2, 3, 0})
	assert.Equal(t, []int{0, 1, 1, 2}, sub.HostOf)
	assert.Equal(t, 3, sub.Hosts)
	assert.Equal(t, []int{1, 2}, sub.RanksOn(1))
}
