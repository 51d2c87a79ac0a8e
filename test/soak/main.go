//go:build linux

// Command soak is the kill soak of docs/RELIABILITY.md (make
// test-faults-soak): trial after trial, it starts a job of P ranks of
// `sparcml bench`, SIGKILLs one random rank at a random moment (in Init,
// or in a dense, a sparse or a compressed allreduce), and checks that
// every survivor exits non-zero within the bound, naming the victim, and
// that the job leaves nothing behind (processes, shared-memory mappings,
// files in /dev/shm). Ranks are started by hand, each with its rank's
// environment as a user would without a launcher, or under `sparcml run
// --keep-going` (so that each survivor fails on its own rather than being
// stopped by the launcher). It prints a table per job size and phase.
//
//	go run ./test/soak -bin bin/sparcml -trials 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Bounds. SPARCML_INIT_TIMEOUT and SPARCML_TIMEOUT are set to
// initTimeout for every rank.
const (
	initTimeout = 10 * time.Second
	// bound: every survivor exits within it of the kill, except when the
	// victim died before it reached the store (never seen: the others
	// wait for SPARCML_INIT_TIMEOUT, the documented bound of that case).
	bound = 5 * time.Second
	// hangAfter: a survivor still running this long after the kill hangs.
	hangAfter = initTimeout + 20*time.Second
)

func main() {
	bin := flag.String("bin", "bin/sparcml", "the sparcml binary")
	trials := flag.Int("trials", envInt("SOAK_TRIALS", 1000), "kill trials in all, spread over the job sizes (env SOAK_TRIALS)")
	sizes := flag.String("p", "4,8", "job sizes, comma-separated")
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()), "random seed (printed, to rerun a soak)")
	timeout := flag.Duration("timeout", 3*time.Hour, "give up (and clean up) after this long")
	verbose := flag.Bool("v", false, "print every trial")
	flag.Parse()
	var ps []int
	for _, f := range strings.Split(*sizes, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 2 {
			fatalf("bad -p %q", *sizes)
		}
		ps = append(ps, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	s := &soak{bin: *bin, rng: rand.New(rand.NewPCG(*seed, 1)), ready: map[int]time.Duration{}, verbose: *verbose}
	s.phases = opPhases()
	fmt.Printf("kill soak: %d trials at P = %s, seed %d; ops: %s\n", *trials, *sizes, *seed, describePhases(s.phases))
	tab := newTable()
	start := time.Now()
	for i := range *trials {
		if ctx.Err() != nil {
			fmt.Printf("stopped after %d trials: %v\n", i, context.Cause(ctx))
			break
		}
		p := ps[i%len(ps)]
		byHand := (i/len(ps))%2 == 0
		r := s.trial(ctx, i, p, byHand)
		tab.add(r)
		if s.verbose || !r.clean() {
			fmt.Println(r.summary())
		}
		if (i+1)%100 == 0 {
			fmt.Printf("%d trials, %d clean, %v\n", i+1, tab.clean(), time.Since(start).Round(time.Second))
		}
	}
	fmt.Printf("\n%d trials in %v\n\n", tab.total(), time.Since(start).Round(time.Second))
	tab.print(os.Stdout)
	if !tab.allClean() {
		os.Exit(1)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...)
	os.Exit(2)
}
