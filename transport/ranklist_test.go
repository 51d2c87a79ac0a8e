package transport

import (
	"strings"
	"testing"
)

func TestRankList(t *testing.T) {
	assertEqual(t, "rank 3", RankList([]int{3}))
	assertEqual(t, "rank 1, rank 3", RankList([]int{1, 3}))
	many := make([]int, 20)
	for i := range many {
		many[i] = i
	}
	got := RankList(many)
	if !strings.HasSuffix(got, "rank 15, ... (20 in all)") || strings.Contains(got, "rank 16") {
		t.Errorf("RankList of 20 ranks: %q", got)
	}
}

func assertEqual(t *testing.T, want, got string) {
	t.Helper()
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
