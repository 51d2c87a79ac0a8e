// Command sparcml launches, benchmarks and inspects sparcml jobs.
//
//	sparcml run -n N [--] PROGRAM ARGS...   start N local ranks of PROGRAM
//	sparcml bench [-n N] [flags]            nccl-tests-style benchmark
//	sparcml devices                         RDMA devices, ports, GIDs, counters
//	sparcml version
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/sparcml/sparcml/internal/launch"
)

const usage = `sparcml: a sparsity-aware communication runtime for distributed ML

usage:
  sparcml run -n N [--timeout D] [--no-prefix] [--] PROGRAM [ARGS...]
        start N ranks of PROGRAM on this host with SPARCML_RANK, SPARCML_SIZE,
        SPARCML_ADDR and SPARCML_TOKEN set; output lines are prefixed [rank]
  sparcml bench [-n N] [--op OP] [--sizes MIN:MAX] [flags]
        benchmark a collective (run 'sparcml bench -h' for the flags)
  sparcml devices
        list RDMA devices, their ports, GIDs, network interfaces and counters
  sparcml version
`

// version is set by the Makefile with -ldflags.
var version = "dev"

func main() {
	os.Exit(realMain(os.Args[1:]))
}

func realMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = runCmd(args[1:])
	case "bench":
		err = benchCmd(args[1:])
	case "devices":
		err = devicesCmd(args[1:])
	case "version", "--version", "-v":
		fmt.Println("sparcml", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "sparcml: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err == nil {
		return 0
	}
	var re *launch.RankError
	if errors.As(err, &re) {
		// The launcher already said which rank failed.
		return re.Code
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(os.Stderr, "sparcml %s: %v\n", args[0], err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "sparcml %s: %v\n", args[0], err)
	return 1
}

// usageError marks bad command-line input (exit status 2).
type usageError struct{ error }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}
