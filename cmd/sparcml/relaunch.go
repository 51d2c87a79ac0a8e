package main

import (
	"context"
	"os"
	"strings"

	"github.com/sparcml/sparcml/internal/launch"
)

// relaunchJob is what `bench -n N` and `train -n N` hand to relaunchSelf.
type relaunchJob struct {
	sub       string   // the subcommand the ranks run
	args      []string // its command line, -n included
	n         int
	progress  bool
	bindTo    string // checked when parsing
	token     string // the job token; a fresh one if empty
	keepGoing bool   // the others go on when a rank fails
}

// relaunchSelf starts j.n local ranks of this binary running the same
// subcommand without -n.
func relaunchSelf(j relaunchJob) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The ranks' stderr is a pipe to the launcher: decide for them.
	env := []string{"SPARCML_PROGRESS=0"}
	if j.progress {
		env = []string{"SPARCML_PROGRESS=1"}
	}
	bind, _ := parseBindTo(j.bindTo)
	return launch.Run(context.Background(), launch.Config{
		N: j.n, Program: self, Args: append([]string{j.sub}, withoutN(j.args)...),
		Env: env, Stdout: os.Stdout, Stderr: os.Stderr,
		BindCores: bind, Token: j.token, KeepGoing: j.keepGoing,
	})
}

// withoutN drops -n N (and -n=N) from a command line.
func withoutN(args []string) []string {
	var out []string
	skip := false
	for _, a := range args {
		switch {
		case skip:
			skip = false
		case a == "-n" || a == "--n":
			skip = true
		case strings.HasPrefix(a, "-n=") || strings.HasPrefix(a, "--n="):
		default:
			out = append(out, a)
		}
	}
	return out
}
