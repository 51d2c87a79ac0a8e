package main

import (
	"testing"

	"github.com/sparcml/sparcml/compress"
)

// --scope global reaches the top-k variant; it is refused with another
// reduction and when unknown.
func TestTrainScopeFlag(t *testing.T) {
	f, err := parseTrainFlags([]string{"--reduce", "topk", "--scope", "global"})
	if err != nil || len(f.variants) != 1 || f.variants[0].Scope != compress.ScopeGlobal || f.variants[0].Name() != "topk:0.01+global" {
		t.Fatalf("--reduce topk --scope global: %+v, %v", f, err)
	}
	if f, err = parseTrainFlags([]string{"--reduce", "topk"}); err != nil || f.variants[0].Scope != compress.ScopeUnion {
		t.Fatalf("default scope: %+v, %v", f, err)
	}
	if f, err = parseTrainFlags([]string{"--reduce", "topk", "--scope", "global", "--global-period", "1"}); err != nil || f.cfg.GlobalPeriod != 1 {
		t.Fatalf("--global-period 1: %+v, %v", f, err)
	}
	if f, err = parseTrainFlags([]string{"--reduce", "topk", "--scope", "global", "--global-warmup-epochs", "4"}); err != nil || f.cfg.GlobalWarmupEpochs != 4 {
		t.Fatalf("--global-warmup-epochs 4: %+v, %v", f, err)
	}
	for _, args := range [][]string{{"--scope", "global"}, {"--reduce", "topk", "--scope", "local"}, {"--reduce", "topk", "--scope", "global", "--global-period", "-1"},
		{"--reduce", "topk", "--scope", "global", "--global-warmup-epochs", "-1"}, {"--reduce", "topk", "--scope", "global", "--global-warmup-epochs", "NaN"}} {
		if _, err := parseTrainFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%v: %v is not a usage error", args, err)
		}
	}
}
