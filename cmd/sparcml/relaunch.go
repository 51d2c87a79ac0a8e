package main

import (
	"context"
	"os"
	"strconv"
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
	args := append([]string{j.sub}, withoutN(j.args)...)
	args = append(args, "--progress="+strconv.FormatBool(j.progress))
	bind, _ := parseBindTo(j.bindTo)
	return launch.Run(context.Background(), launch.Config{
		N: j.n, Program: self, Args: args,
		Stdout: os.Stdout, Stderr: os.Stderr,
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

// progressFlag is --progress: on or off when given, else on when stderr
// is a terminal.
type progressFlag struct{ set, on bool }

func (p *progressFlag) Set(v string) error {
	on, err := strconv.ParseBool(v)
	p.set, p.on = true, on
	return err
}

func (p *progressFlag) String() string {
	if p == nil || !p.set {
		return ""
	}
	return strconv.FormatBool(p.on)
}

func (p *progressFlag) IsBoolFlag() bool { return true }

// show says whether to draw the progress line.
func (p *progressFlag) show() bool {
	if p.set {
		return p.on
	}
	return isTerminal(os.Stderr)
}

const progressUsage = "draw a progress line on stderr (--progress=false: never; default: when stderr is a terminal)"
