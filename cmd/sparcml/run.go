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
	return launch.Run(context.Background(), launch.Config{
		N: *n, Program: rest[0], Args: rest[1:],
		Stdout: os.Stdout, Stderr: os.Stderr,
		Prefix: !*noPrefix, Timeout: *timeout, Grace: 3 * time.Second,
	})
}
