// Command sparcml launches, benchmarks and inspects sparcml jobs.
//
//	sparcml run -n N [flags] [--] PROGRAM ARGS...   start N local ranks of PROGRAM
//	sparcml bench [-n N] [flags]                    nccl-tests-style benchmark
//	sparcml train [-n N] [flags]                    data-parallel training
//	sparcml trace DUMP...                           merge the ranks' flight-recorder dumps
//	sparcml devices                                 RDMA devices, ports, GIDs, counters
//	sparcml version                                 version, commit, Go, RDMA support
//
// `sparcml COMMAND -h` lists a command's flags.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sparcml/sparcml/internal/launch"
)

// usage is the top-level help: every command with its flags' names, which
// come from the commands' own flag sets so they cannot drift apart.
func usage() string {
	var b strings.Builder
	b.WriteString(`sparcml: a sparsity-aware communication runtime for distributed ML

usage:
  sparcml run -n N [flags] [--] PROGRAM [ARGS...]
        start N ranks of PROGRAM on this host with sparcml's and torchrun's
        environment; output lines are prefixed [rank]
`)
	fmt.Fprintf(&b, "        flags: %s\n", flagNames(newRunFlags(&runFlags{}), nil))
	b.WriteString(`  sparcml bench [-n N] [--op OP] [--sizes MIN:MAX | --bytes MIN:MAX] [flags]
        benchmark a collective, nccl-tests style
`)
	fmt.Fprintf(&b, "        flags: %s\n", wrap(flagNames(newBenchFlags(&benchConfig{}, &benchFlagValues{}), hiddenBenchFlags), 64, "               "))
	b.WriteString(`  sparcml sim [-n P] [--op OP] [--sizes MIN:MAX] [--algo A,B|all] [flags]
        the library's collectives over a simulated network in virtual time
`)
	fmt.Fprintf(&b, "        flags: %s\n", wrap(flagNames(newSimFlags(&simConfig{}, &simFlagValues{}), nil), 64, "               "))
	b.WriteString(`  sparcml train [-n N] [--model mlp|logreg] [--data D] [--reduce R] [flags]
        data-parallel training: an MLP on Fashion-MNIST or logistic regression
        on LIBSVM or generated data, dense, sparse or top-k gradient reduction
`)
	fmt.Fprintf(&b, "        flags: %s\n", wrap(flagNames(newTrainFlags(&trainFlags{}, &trainFlagValues{}), nil), 64, "               "))
	b.WriteString(`  sparcml trace DUMP...
        merge the flight-recorder dumps the ranks wrote to SPARCML_DUMP_DIR
        (files or directories) into one view of where each rank stood
  sparcml devices
        list RDMA devices, their ports, GIDs, network interfaces and counters
  sparcml version
        print the version, commit, Go version and whether RDMA is compiled in

'sparcml COMMAND -h' describes each flag of a command.
`)
	return b.String()
}

// wrap breaks s into lines of at most width characters at spaces, the
// continuation lines indented by indent.
func wrap(s string, width int, indent string) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	lines = append(lines, line)
	return strings.Join(lines, "\n"+indent)
}

func main() {
	os.Exit(realMain(os.Args[1:]))
}

func realMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage())
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = runCmd(args[1:])
	case "bench":
		err = benchCmd(args[1:])
	case "train":
		err = trainCmd(args[1:])
	case "sim":
		err = simCmd(args[1:])
	case "trace":
		err = traceCmd(os.Stdout, args[1:])
	case "devices":
		err = devicesCmd(args[1:])
	case "version", "--version", "-v":
		err = versionCmd(os.Stdout, args[1:])
	case "help", "-h", "--help":
		fmt.Print(usage())
	default:
		fmt.Fprintf(os.Stderr, "sparcml: unknown command %q\n\n%s", args[0], usage())
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
	// The library's errors start with its name, which this line says
	// already: "sparcml bench: rank 1: ...", not "sparcml bench: sparcml:
	// rank 1: ...".
	fmt.Fprintf(os.Stderr, "sparcml %s: %s\n", args[0], strings.TrimPrefix(err.Error(), "sparcml: "))
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// usageError marks bad command-line input (exit status 2).
type usageError struct{ error }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}
