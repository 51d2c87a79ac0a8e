package simrun

import (
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/compress"
)

// TestCompressScopes checks both scopes' results and every rank's
// residual against bench's reference at 5 and 64 ranks.
func TestCompressScopes(t *testing.T) {
	for _, p := range []int{5, 64} {
		for _, scope := range []compress.Scope{compress.ScopeUnion, compress.ScopeGlobal} {
			c := Case{Op: "compress", N: 20000, Density: 0.01, Algo: collectives.AlgoAuto, Seed: 4, Scope: scope}
			res := simulate(t, defaultMachine(p), c)
			if res.K != 200 || res.Kept == 0 {
				t.Errorf("P=%d %v: k %d, kept %d", p, scope, res.K, res.Kept)
			}
		}
	}
}

// TestGlobalTopkBeatsUnionAt256 runs both scopes side by side: at 256
// ranks and 10 Gbit/s, 1% of 256K entries, the global top-k reduction
// (selection included) sends at least 5x fewer bytes per rank than the
// union sum and takes no longer in virtual time.
// Both results are checked against bench's reference.
func TestGlobalTopkBeatsUnionAt256(t *testing.T) {
	if testing.Short() {
		t.Skip("256 ranks")
	}
	c := Case{Op: "compress", N: 256 << 10, Density: 0.01, Algo: collectives.AlgoAuto, Seed: 1, Scope: compress.ScopeUnion}
	union := simulate(t, defaultMachine(256), c)
	c.Scope = compress.ScopeGlobal
	global := simulate(t, defaultMachine(256), c)
	t.Logf("union %v: %d bytes/rank, %.0f us; global: %d bytes/rank, %.0f us", union.Algo, union.MaxBytesSent, union.Seconds*1e6,
		global.MaxBytesSent, global.Seconds*1e6)
	if 5*global.MaxBytesSent > union.MaxBytesSent {
		t.Errorf("global sends %d bytes per rank, union %d: not 5x fewer", global.MaxBytesSent, union.MaxBytesSent)
	}
	if global.Seconds > union.Seconds {
		t.Errorf("global takes %.0f us, union %.0f us", global.Seconds*1e6, union.Seconds*1e6)
	}
}
