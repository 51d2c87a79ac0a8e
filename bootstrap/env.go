package bootstrap

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout is the per-operation deadline used when SPARCML_TIMEOUT is
// not set.
const DefaultTimeout = 5 * time.Minute

// MaxSize is the largest job size accepted; it keeps a mistyped size from
// making rank 0 allocate per-rank state for billions of ranks.
const MaxSize = 1 << 20

// slurmBasePort is the first port of the range from which a Slurm job picks
// its default rendezvous port (29500 + SLURM_JOB_ID % 1000), so that jobs
// sharing a first node rarely collide.
const slurmBasePort = 29500

// Env describes this process's place in a job.
type Env struct {
	Rank, Size  int
	Addr        string        // host:port of rank 0's store
	Token       []byte        // job secret
	TokenSource string        // e.g. "SPARCML_TOKEN" or "derived from SLURM_JOB_ID (not secret)"
	IfName      string        // SPARCML_IFNAME, may be ""
	Timeout     time.Duration // default per-operation deadline from SPARCML_TIMEOUT; default 5m; "0" or "none" = no deadline
	Launcher    string        // "sparcml", "torchrun", "mpirun", "srun"

	// AddrSource names the variables Addr came from (for example
	// "SPARCML_ADDR" or "MASTER_ADDR:MASTER_PORT"), so that errors about
	// the rendezvous address tell the user what to fix. May be "".
	AddrSource string
}

// launcher describes how one launcher passes rank and size.
type launcher struct {
	name              string
	rankVar, sizeVar  string
	altRank, altSize  string // a second spelling of the same pair, tried when the first is absent
	rendezvousFromEnv func(getenv func(string) string, e *Env) error
	derivedToken      func(getenv func(string) string) (token []byte, source string, ok bool)
}

// launchers in priority order. mpirun comes before srun because processes
// started by mpirun inside a Slurm allocation inherit SLURM_PROCID from
// mpirun's daemons, which is the node index, not the process's rank.
var launchers = []launcher{
	{
		name: "sparcml", rankVar: "SPARCML_RANK", sizeVar: "SPARCML_SIZE",
		rendezvousFromEnv: sparcmlRendezvous,
	},
	{
		name: "torchrun", rankVar: "RANK", sizeVar: "WORLD_SIZE",
		rendezvousFromEnv: torchrunRendezvous,
		derivedToken:      torchrunToken,
	},
	{
		name: "mpirun", rankVar: "OMPI_COMM_WORLD_RANK", sizeVar: "OMPI_COMM_WORLD_SIZE",
		altRank: "PMI_RANK", altSize: "PMI_SIZE",
		rendezvousFromEnv: mpirunRendezvous,
		derivedToken:      mpirunToken,
	},
	{
		name: "srun", rankVar: "SLURM_PROCID", sizeVar: "SLURM_NTASKS",
		altSize:           "SLURM_NPROCS",
		rendezvousFromEnv: slurmRendezvous,
		derivedToken:      slurmToken,
	},
}

// FromEnv builds the job description from the launcher's environment
// variables, read through getenv (os.Getenv in production). Our own
// launcher's variables win over torchrun's, which win over mpirun's, which
// win over srun's. SPARCML_ADDR always overrides the rendezvous address.
func FromEnv(getenv func(string) string) (Env, error) {
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }
	l, rankVar, sizeVar, err := detectLauncher(get)
	if err != nil {
		return Env{}, err
	}
	e := Env{Launcher: l.name, IfName: get("SPARCML_IFNAME")}
	if e.Rank, err = parseCount(rankVar, get(rankVar), 0); err != nil {
		return Env{}, err
	}
	if e.Size, err = parseCount(sizeVar, get(sizeVar), 1); err != nil {
		return Env{}, err
	}
	if e.Size > MaxSize {
		return Env{}, fmt.Errorf("bootstrap: %s=%d exceeds the supported maximum of %d ranks", sizeVar, e.Size, MaxSize)
	}
	if e.Rank >= e.Size {
		return Env{}, fmt.Errorf("bootstrap: %s=%d is not below %s=%d", rankVar, e.Rank, sizeVar, e.Size)
	}
	if a := get("SPARCML_ADDR"); a != "" {
		e.Addr, e.AddrSource = a, "SPARCML_ADDR"
	} else if err := l.rendezvousFromEnv(get, &e); err != nil {
		return Env{}, err
	}
	if err := checkAddr(e.Addr, e.AddrSource); err != nil {
		return Env{}, err
	}
	if err := setToken(get, l, &e); err != nil {
		return Env{}, err
	}
	if e.Timeout, err = parseTimeout(get("SPARCML_TIMEOUT")); err != nil {
		return Env{}, err
	}
	return e, nil
}

// detectLauncher returns the first launcher whose rank and size variables
// are both set, with the spelling of the variables it found.
func detectLauncher(get func(string) string) (l launcher, rankVar, sizeVar string, err error) {
	var partial []string
	var looked []string
	for _, l := range launchers {
		rankVar := pick(get, l.rankVar, l.altRank)
		sizeVar := pick(get, l.sizeVar, l.altSize)
		rankSet, sizeSet := get(rankVar) != "", get(sizeVar) != ""
		if rankSet && sizeSet {
			return l, rankVar, sizeVar, nil
		}
		if rankSet != sizeSet {
			set, unset := rankVar, l.sizeVar
			if sizeSet {
				set, unset = sizeVar, l.rankVar
			}
			partial = append(partial, fmt.Sprintf("%s is set but %s is not (%s)", set, unset, l.name))
		}
		looked = append(looked, l.name+": "+pairNames(l))
	}
	if len(partial) > 0 {
		return launcher{}, "", "", fmt.Errorf("bootstrap: incomplete launcher environment: %s", strings.Join(partial, "; "))
	}
	return launcher{}, "", "", fmt.Errorf("bootstrap: no launcher environment found; looked for %s", strings.Join(looked, "; "))
}

// pick returns name unless it is unset and alt is set.
func pick(get func(string) string, name, alt string) string {
	if get(name) == "" && alt != "" && get(alt) != "" {
		return alt
	}
	return name
}

func pairNames(l launcher) string {
	s := l.rankVar + "/" + l.sizeVar
	if l.altRank != "" || l.altSize != "" {
		s += " (or " + orDefault(l.altRank, l.rankVar) + "/" + orDefault(l.altSize, l.sizeVar) + ")"
	}
	return s
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// parseCount parses a non-negative decimal integer of at least min.
func parseCount(name, value string, min int) (int, error) {
	n, err := strconv.Atoi(value)
	if err != nil {
		return 0, fmt.Errorf("bootstrap: %s=%q is not an integer", name, value)
	}
	if n < min {
		return 0, fmt.Errorf("bootstrap: %s=%d must be at least %d", name, n, min)
	}
	return n, nil
}

// checkAddr checks that addr is host:port with a non-empty host and a port
// in 1..65535; source names the variables it came from.
func checkAddr(addr, source string) error {
	from := ""
	if source != "" {
		from = " (from " + source + ")"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bootstrap: rendezvous address %q%s is not host:port: %v", addr, from, err)
	}
	if host == "" {
		return fmt.Errorf("bootstrap: rendezvous address %q%s has no host", addr, from)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("bootstrap: rendezvous address %q%s: port %q is not a number in 1..65535", addr, from, port)
	}
	return nil
}

func sparcmlRendezvous(get func(string) string, e *Env) error {
	return errors.New("bootstrap: SPARCML_RANK and SPARCML_SIZE are set but SPARCML_ADDR (host:port of rank 0's store) is not")
}

// torchrunRendezvous uses MASTER_ADDR and MASTER_PORT. When torchrun's
// agent serves its own store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE),
// that port is taken, so the next one is used; SPARCML_PORT overrides both.
func torchrunRendezvous(get func(string) string, e *Env) error {
	host, port := get("MASTER_ADDR"), get("MASTER_PORT")
	if host == "" || port == "" {
		return errors.New("bootstrap: torchrun environment (RANK, WORLD_SIZE) without MASTER_ADDR and MASTER_PORT; set SPARCML_ADDR=host:port")
	}
	e.AddrSource = "MASTER_ADDR:MASTER_PORT"
	if p := get("SPARCML_PORT"); p != "" {
		port, e.AddrSource = p, "MASTER_ADDR:SPARCML_PORT"
	} else if get("TORCHELASTIC_USE_AGENT_STORE") == "True" {
		p, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("bootstrap: MASTER_PORT=%q is not a number", port)
		}
		port, e.AddrSource = strconv.Itoa(p+1), "MASTER_ADDR:MASTER_PORT+1 (torchrun's agent store uses MASTER_PORT)"
	}
	e.Addr = net.JoinHostPort(host, port)
	return nil
}

func mpirunRendezvous(get func(string) string, e *Env) error {
	return errors.New("bootstrap: launched by mpirun but SPARCML_ADDR is not set; mpirun does not provide a rendezvous address: pass `-x SPARCML_ADDR=host:port` (a host:port of the node running rank 0)")
}

// slurmRendezvous uses the first node of the step (or job) and port
// SPARCML_PORT, else 29500 + SLURM_JOB_ID % 1000.
func slurmRendezvous(get func(string) string, e *Env) error {
	listVar := "SLURM_STEP_NODELIST"
	list := get(listVar)
	if list == "" {
		listVar = "SLURM_JOB_NODELIST"
		list = get(listVar)
	}
	if list == "" {
		return errors.New("bootstrap: srun environment without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST; set SPARCML_ADDR=host:port")
	}
	host, err := firstNode(list)
	if err != nil {
		return fmt.Errorf("bootstrap: %s=%q: %v; set SPARCML_ADDR=host:port", listVar, list, err)
	}
	portSource := "SPARCML_PORT"
	port := get("SPARCML_PORT")
	if port == "" {
		job, err := strconv.ParseUint(get("SLURM_JOB_ID"), 10, 64)
		if err != nil {
			return fmt.Errorf("bootstrap: SLURM_JOB_ID=%q is not a number, so no default rendezvous port; set SPARCML_PORT or SPARCML_ADDR", get("SLURM_JOB_ID"))
		}
		port = strconv.FormatUint(slurmBasePort+job%1000, 10)
		portSource = "29500+SLURM_JOB_ID%1000"
	}
	e.Addr = net.JoinHostPort(host, port)
	e.AddrSource = "first node of " + listVar + ", port " + portSource
	return nil
}

// firstNode returns the first host name of a Slurm node list such as
// "node[03-05,7],gpu1": the first top-level entry, with every bracket
// group replaced by the start of its first range ("node03"). Zero padding
// is kept because the start is copied as written.
func firstNode(list string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(list); i++ {
		switch c := list[i]; c {
		case ',':
			return finishNode(b.String())
		case ']':
			return "", errors.New("unbalanced ']' in node list")
		case '[':
			end := strings.IndexByte(list[i:], ']')
			if end < 0 {
				return "", errors.New("unterminated '[' in node list")
			}
			first := list[i+1 : i+end]
			first, _, _ = strings.Cut(first, ",")
			first, _, _ = strings.Cut(first, "-")
			if first == "" || strings.Trim(first, "0123456789") != "" {
				return "", fmt.Errorf("bad range %q in node list", list[i:i+end+1])
			}
			b.WriteString(first)
			i += end
		default:
			b.WriteByte(c)
		}
	}
	return finishNode(b.String())
}

func finishNode(host string) (string, error) {
	if host == "" {
		return "", errors.New("empty first node in node list")
	}
	return host, nil
}

// setToken takes SPARCML_TOKEN, or derives a non-secret token from the
// launcher's job identity when the launcher has one.
func setToken(get func(string) string, l launcher, e *Env) error {
	if t := get("SPARCML_TOKEN"); t != "" {
		e.Token, e.TokenSource = []byte(t), "SPARCML_TOKEN"
		return nil
	}
	if l.derivedToken == nil {
		return fmt.Errorf("bootstrap: SPARCML_TOKEN is not set (the %s launcher always sets it; was the environment passed on?)", l.name)
	}
	token, source, ok := l.derivedToken(get)
	if !ok {
		return fmt.Errorf("bootstrap: SPARCML_TOKEN is not set and %s", source)
	}
	e.Token, e.TokenSource = token, source
	return nil
}

func torchrunToken(get func(string) string) ([]byte, string, bool) {
	id := "torchrun:" + get("MASTER_ADDR") + ":" + get("MASTER_PORT") + ":" + get("TORCHELASTIC_RUN_ID")
	return []byte(id), "derived from MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RUN_ID (not secret; set SPARCML_TOKEN)", true
}

func mpirunToken(get func(string) string) ([]byte, string, bool) {
	id := "mpirun:" + get("SPARCML_ADDR")
	return []byte(id), "derived from SPARCML_ADDR (not secret; pass `-x SPARCML_TOKEN=...`)", true
}

func slurmToken(get func(string) string) ([]byte, string, bool) {
	job := get("SLURM_JOB_ID")
	if job == "" {
		return nil, "SLURM_JOB_ID is not set to derive one from", false
	}
	id := "srun:" + job + "." + get("SLURM_STEP_ID")
	return []byte(id), "derived from SLURM_JOB_ID and SLURM_STEP_ID (not secret; set SPARCML_TOKEN)", true
}

// parseTimeout accepts a Go duration ("90s", "2m"), plain seconds ("90",
// "1.5"), or "0"/"none" for no deadline. Empty means DefaultTimeout.
func parseTimeout(s string) (time.Duration, error) {
	switch strings.ToLower(s) {
	case "":
		return DefaultTimeout, nil
	case "0", "none":
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || secs != secs || secs > float64(1<<62)/float64(time.Second) {
			return 0, fmt.Errorf("bootstrap: SPARCML_TIMEOUT=%q is neither a duration (\"90s\") nor a number of seconds", s)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 {
		return 0, fmt.Errorf("bootstrap: SPARCML_TIMEOUT=%q is negative", s)
	}
	return d, nil
}

// Validate checks that the description is usable; its messages name the
// launcher variable to fix.
func (e Env) Validate() error {
	rankVar, sizeVar := "rank", "size"
	for _, l := range launchers {
		if l.name == e.Launcher {
			rankVar, sizeVar = l.rankVar, l.sizeVar
		}
	}
	if e.Size < 1 || e.Size > MaxSize {
		return fmt.Errorf("bootstrap: %s=%d must be in 1..%d", sizeVar, e.Size, MaxSize)
	}
	if e.Rank < 0 || e.Rank >= e.Size {
		return fmt.Errorf("bootstrap: %s=%d is outside [0,%d) (%s=%d)", rankVar, e.Rank, e.Size, sizeVar, e.Size)
	}
	if err := checkAddr(e.Addr, orDefault(e.AddrSource, "SPARCML_ADDR")); err != nil {
		return err
	}
	if len(e.Token) == 0 {
		return errors.New("bootstrap: empty job token (SPARCML_TOKEN)")
	}
	if e.Timeout < 0 {
		return fmt.Errorf("bootstrap: negative timeout %v (SPARCML_TIMEOUT)", e.Timeout)
	}
	return nil
}

// NewToken returns a fresh job secret: 32 random bytes, hex encoded.
func NewToken() string {
	b := make([]byte, 32)
	// crypto/rand.Read never fails on supported platforms (it aborts the
	// program instead), so there is no error to handle.
	rand.Read(b)
	return hex.EncodeToString(b)
}
