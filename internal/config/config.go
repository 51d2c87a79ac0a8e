// Package config is the one place where sparcml reads its environment:
// every SPARCML_* variable is declared once in the table Vars with its
// type, default and meaning (as NCCL declares its parameters with
// NCCL_PARAM), read and validated by Load, and handed to the packages
// below the public API as the typed fields of Settings. The tables of
// variables in docs/CONFIGURATION.md are generated from Vars (go test
// ./internal/config -update). Unknown reports the SPARCML_* names of an
// environment that Vars does not declare (a typing mistake, or a variable
// that was removed).
package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sparcml/sparcml/internal/logging"
)

// Settings holds every SPARCML_* variable, parsed; a variable that is not
// set has its default.
type Settings struct {
	// The job, as sparcml's own launcher describes it.
	Rank, Size           int // -1: not set
	LocalRank, LocalSize int // -1: not set; for the application, not read by the library
	Addr                 string
	Token                string
	Port                 int // 0: not set
	IfName               string

	// Choices and bounds.
	Transport   string        // "auto", "shm", "tcp" or "rdma"
	Timeout     time.Duration // 0: no default deadline
	InitTimeout time.Duration // 0: Init unbounded
	Calibrate   bool
	// SparseAgreeEvery: calls of a sparse allreduce per counts exchange.
	SparseAgreeEvery int
	OnPeerLoss       string // "abort" or "revoke"

	// Fault diagnosis.
	StallWarn time.Duration // 0: no stall warning
	DumpDir   string        // "": no flight-recorder dumps
	FlightOps int           // operations the flight recorder keeps

	// Logging.
	Debug       logging.Level
	DebugSubsys logging.Subsys

	// The TCP transport.
	TCPCongestion string

	// The RDMA transport, in rdma.Config's terms.
	IBDev         string
	IBGIDIndex    int           // -1: chosen automatically
	RDMAEager     int           // 0: the transport's default
	RDMASpin      time.Duration // 0: the transport's default; negative: never
	RDMAWaitSpin  time.Duration // 0: the transport's default; negative: never
	RDMAAdvertise bool

	// set lists the variables that were set, in table order, with their
	// values (secrets hidden), for the start-up log.
	set []string
}

// Var declares one variable.
type Var struct {
	Name string
	// Type is the kind of value, as docs/CONFIGURATION.md shows it.
	Type string
	// Default is the value used when the variable is not set, parsed
	// like a set value; "" when not setting it means something else,
	// which Unset says.
	Default string
	Unset   string
	// Meaning is what the variable does, for docs/CONFIGURATION.md.
	Meaning string
	// Secret values are never logged.
	Secret bool
	// Advanced variables tune the transports and the start-up; the
	// documentation lists them apart from those every user may set.
	Advanced bool
	// parse checks value and stores it in s.
	parse func(s *Settings, value string) error
}

// DefaultText is the default as docs/CONFIGURATION.md shows it.
func (v *Var) DefaultText() string {
	if v.Default != "" {
		return "`" + v.Default + "`"
	}
	return v.Unset
}

// Error is an invalid value: it names the variable and the value.
type Error struct {
	Name, Value string
	Err         error
}

func (e *Error) Error() string { return fmt.Sprintf("%s=%q: %v", e.Name, e.Value, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Load reads every variable of Vars through getenv (os.Getenv in
// production), with surrounding spaces trimmed, and returns the settings,
// or an error naming every variable whose value is invalid.
func Load(getenv func(string) string) (*Settings, error) {
	s := &Settings{}
	var errs []error
	for i := range Vars {
		v := &Vars[i]
		value := strings.TrimSpace(getenv(v.Name))
		if value == "" {
			if err := v.parse(s, v.Default); err != nil {
				panic(fmt.Sprintf("config: the default of %s does not parse: %v", v.Name, err))
			}
			continue
		}
		if err := v.parse(s, value); err != nil {
			errs = append(errs, &Error{Name: v.Name, Value: value, Err: err})
			continue
		}
		shown := value
		if v.Secret {
			shown = "(set, not shown)"
		}
		s.set = append(s.set, v.Name+"="+shown)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// SetVars lists the variables that were set, as NAME=value (secrets
// hidden), in table order.
func (s *Settings) SetVars() []string { return s.set }

// Lookup returns the declaration of the variable called name.
func Lookup(name string) (*Var, bool) {
	for i := range Vars {
		if Vars[i].Name == name {
			return &Vars[i], true
		}
	}
	return nil, false
}

// Markdown renders the variables of Vars whose Advanced is advanced as a
// table of docs/CONFIGURATION.md.
func Markdown(advanced bool) string {
	var b strings.Builder
	b.WriteString("| variable | type | default | meaning |\n| --- | --- | --- | --- |\n")
	for i := range Vars {
		v := &Vars[i]
		if v.Advanced != advanced {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.Name, v.Type, v.DefaultText(), v.Meaning)
	}
	return b.String()
}
