package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/launch"
)

const runUsage = `usage: sparcml run -n N [flags] [--] PROGRAM [ARGS...]

Starts N ranks of PROGRAM on this host. Each gets SPARCML_RANK,
SPARCML_SIZE, SPARCML_LOCAL_RANK, SPARCML_LOCAL_SIZE, SPARCML_ADDR and
SPARCML_TOKEN, and torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (a port of its own, not
sparcml's), so a PyTorch script runs under it unchanged. Output lines are
prefixed [rank]; SIGINT, SIGTERM and SIGHUP are forwarded; when a rank
fails the others are stopped and sparcml run exits with its status.

flags:`

// runFlags are the flags of `sparcml run`.
type runFlags struct {
	n        int
	timeout  time.Duration
	noPrefix bool
	bindTo   string
	keepOn   bool
}

func newRunFlags(f *runFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.IntVar(&f.n, "n", 0, "number of ranks to start (required)")
	fs.DurationVar(&f.timeout, "timeout", 0, "stop the job after this long (0: no limit)")
	fs.BoolVar(&f.noPrefix, "no-prefix", false, "do not prefix output lines with [rank]")
	fs.StringVar(&f.bindTo, "bind-to", "none", "core: bind rank r to one CPU (as mpirun --bind-to core); none: leave placement to the kernel")
	fs.BoolVar(&f.keepOn, "keep-going", false, "when a rank fails, leave the others running (for jobs that survive a lost rank: SPARCML_ON_PEER_LOSS=revoke); exit with the first failure's status once all have exited")
	fs.SetOutput(io.Discard)
	return fs
}

func runCmd(args []string) error {
	var f runFlags
	fs := newRunFlags(&f)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Println(runUsage)
			printFlags(os.Stdout, fs, nil)
			return nil
		}
		return usagef("%v (see sparcml run -h)", err)
	}
	rest := fs.Args()
	if f.n < 1 {
		return usagef("-n N (N >= 1) is required (see sparcml run -h)")
	}
	if len(rest) == 0 {
		return usagef("no program given (usage: sparcml run -n N [--] PROGRAM [ARGS...])")
	}
	bind, err := parseBindTo(f.bindTo)
	if err != nil {
		return err
	}
	env, err := config.Load(os.Getenv) // an invalid variable fails here once, not in every rank
	if err != nil {
		return err
	}
	return launch.Run(context.Background(), launch.Config{
		N: f.n, Program: rest[0], Args: rest[1:],
		Stdout: os.Stdout, Stderr: os.Stderr,
		Prefix: !f.noPrefix, Timeout: f.timeout, Grace: 3 * time.Second,
		BindCores: bind, Token: env.Token, KeepGoing: f.keepOn,
	})
}

// parseBindTo reads --bind-to: whether to bind each rank to a CPU.
func parseBindTo(s string) (bool, error) {
	switch s {
	case "none":
		return false, nil
	case "core":
		return true, nil
	}
	return false, usagef("unknown --bind-to %q (want core|none)", s)
}
