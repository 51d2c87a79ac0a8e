package main

import (
	"context"
	"flag"
	"io"
	"os"
	"time"

	"github.com/sparcml/sparcml/internal/launch"
)

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	n := fs.Int("n", 0, "number of ranks to start")
	timeout := fs.Duration("timeout", 0, "stop the job after this long (0: no limit)")
	noPrefix := fs.Bool("no-prefix", false, "do not prefix output lines with [rank]")
	bindTo := fs.String("bind-to", "none", "core: bind rank r to one CPU (as mpirun --bind-to core); none: leave placement to the kernel")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usagef("%v (usage: sparcml run -n N [--] PROGRAM [ARGS...])", err)
	}
	rest := fs.Args()
	if *n < 1 {
		return usagef("-n N (N >= 1) is required")
	}
	if len(rest) == 0 {
		return usagef("no program given (usage: sparcml run -n N [--] PROGRAM [ARGS...])")
	}
	bind, err := parseBindTo(*bindTo)
	if err != nil {
		return err
	}
	return launch.Run(context.Background(), launch.Config{
		N: *n, Program: rest[0], Args: rest[1:],
		Stdout: os.Stdout, Stderr: os.Stderr,
		Prefix: !*noPrefix, Timeout: *timeout, Grace: 3 * time.Second,
		BindCores: bind,
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
