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

// MaxSize is the largest job size accepted; it keeps a mistyped size from
// making rank 0 allocate per-rank state for billions of ranks.
const MaxSize = 1 << 20

// slurmBasePort is the first port of the range from which a Slurm job picks
// its default rendezvous port (29500 + SLURM_JOB_ID % 1000), so that jobs
// sharing a first node rarely collide.
const slurmBasePort = 29500

// Settings are sparcml's own variables as far as bootstrap uses them,
// already read and validated by the caller (the public API reads every
// SPARCML_* variable through one table): bootstrap itself reads only the
// other launchers' variables.
type Settings struct {
	Rank, Size int           // SPARCML_RANK, SPARCML_SIZE; -1 when not set
	Addr       string        // SPARCML_ADDR
	Token      string        // SPARCML_TOKEN
	Port       int           // SPARCML_PORT; 0 when not set
	IfName     string        // SPARCML_IFNAME
	Timeout    time.Duration // SPARCML_TIMEOUT: the default per-operation deadline, 0 for none
}

// Env describes this process's place in a job.
type Env struct {
	Rank, Size  int
	Addr        string        // host:port of rank 0's store
	Token       []byte        // job secret
	TokenSource string        // e.g. "SPARCML_TOKEN" or "derived from SLURM_JOB_ID (not secret)"
	IfName      string        // SPARCML_IFNAME, may be ""
	Timeout     time.Duration // default per-operation deadline (SPARCML_TIMEOUT), 0 for none
	Launcher    string        // "sparcml", "torchrun", "mpirun", "srun", or "none" for a one-rank job without a launcher

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
	rendezvousFromEnv func(l lookup, e *Env) error
	derivedToken      func(l lookup) (token []byte, source string, ok bool)
}

// lookup reads the launchers' variables: sparcml's own from the settings,
// the others' through getenv.
type lookup struct {
	own    Settings
	getenv func(string) string
}

// get returns a launcher variable's value, "" when unset.
func (l lookup) get(name string) string {
	switch name {
	case "SPARCML_RANK":
		return countText(l.own.Rank)
	case "SPARCML_SIZE":
		return countText(l.own.Size)
	}
	return strings.TrimSpace(l.getenv(name))
}

func countText(n int) string {
	if n < 0 {
		return ""
	}
	return strconv.Itoa(n)
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

// FromEnv builds the job description from sparcml's own settings and the
// other launchers' environment variables, read through getenv (os.Getenv
// in production). Our own launcher's variables win over torchrun's, which
// win over mpirun's, which win over srun's. SPARCML_ADDR always overrides
// the rendezvous address. With no launcher's variables at all the error
// wraps ErrNoLauncher.
func FromEnv(own Settings, getenv func(string) string) (Env, error) {
	lk := lookup{own: own, getenv: getenv}
	l, rankVar, sizeVar, err := detectLauncher(lk.get)
	if err != nil {
		return Env{}, err
	}
	e := Env{Launcher: l.name, IfName: own.IfName, Timeout: own.Timeout}
	if e.Rank, err = parseCount(rankVar, lk.get(rankVar), 0); err != nil {
		return Env{}, err
	}
	if e.Size, err = parseCount(sizeVar, lk.get(sizeVar), 1); err != nil {
		return Env{}, err
	}
	if e.Size > MaxSize {
		return Env{}, fmt.Errorf("bootstrap: %s=%d exceeds the supported maximum of %d ranks", sizeVar, e.Size, MaxSize)
	}
	if e.Rank >= e.Size {
		return Env{}, fmt.Errorf("bootstrap: %s=%d is not below %s=%d", rankVar, e.Rank, sizeVar, e.Size)
	}
	if own.Addr != "" {
		e.Addr, e.AddrSource = own.Addr, "SPARCML_ADDR"
	} else if err := l.rendezvousFromEnv(lk, &e); err != nil {
		return Env{}, err
	}
	if err := checkAddr(e.Addr, e.AddrSource); err != nil {
		return Env{}, err
	}
	if err := setToken(lk, l, &e); err != nil {
		return Env{}, err
	}
	return e, nil
}

// ErrNoLauncher is wrapped by FromEnv's error when no launcher's
// variables are set at all (as opposed to an incomplete set): a process
// started on its own, which the public API runs as a one-rank job.
var ErrNoLauncher = errors.New("no launcher environment found")

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
	return launcher{}, "", "", fmt.Errorf("bootstrap: %w; looked for %s", ErrNoLauncher, strings.Join(looked, "; "))
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

// CheckAddr checks that addr is host:port with a non-empty host and a port
// in 1..65535.
func CheckAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not host:port: %v", err)
	}
	if host == "" {
		return errors.New("no host")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q is not a number in 1..65535", port)
	}
	return nil
}

// checkAddr is CheckAddr with the variables addr came from in the error.
func checkAddr(addr, source string) error {
	err := CheckAddr(addr)
	if err == nil {
		return nil
	}
	from := ""
	if source != "" {
		from = " (from " + source + ")"
	}
	return fmt.Errorf("bootstrap: rendezvous address %q%s: %v", addr, from, err)
}

func sparcmlRendezvous(l lookup, e *Env) error {
	return errors.New("bootstrap: SPARCML_RANK and SPARCML_SIZE are set but SPARCML_ADDR (host:port of rank 0's store) is not")
}

// torchrunRendezvous uses MASTER_ADDR and MASTER_PORT. When torchrun's
// agent serves its own store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE),
// that port is taken, so the next one is used; SPARCML_PORT overrides both.
func torchrunRendezvous(l lookup, e *Env) error {
	host, port := l.get("MASTER_ADDR"), l.get("MASTER_PORT")
	if host == "" || port == "" {
		return errors.New("bootstrap: torchrun environment (RANK, WORLD_SIZE) without MASTER_ADDR and MASTER_PORT; set SPARCML_ADDR=host:port")
	}
	e.AddrSource = "MASTER_ADDR:MASTER_PORT"
	if l.own.Port != 0 {
		port, e.AddrSource = strconv.Itoa(l.own.Port), "MASTER_ADDR:SPARCML_PORT"
	} else if l.get("TORCHELASTIC_USE_AGENT_STORE") == "True" {
		p, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("bootstrap: MASTER_PORT=%q is not a number", port)
		}
		port, e.AddrSource = strconv.Itoa(p+1), "MASTER_ADDR:MASTER_PORT+1 (torchrun's agent store uses MASTER_PORT)"
	}
	e.Addr = net.JoinHostPort(host, port)
	return nil
}

func mpirunRendezvous(l lookup, e *Env) error {
	return errors.New("bootstrap: launched by mpirun but SPARCML_ADDR is not set; mpirun does not provide a rendezvous address: pass `-x SPARCML_ADDR=host:port` (a host:port of the node running rank 0)")
}

// slurmRendezvous uses the first node of the step (or job) and port
// SPARCML_PORT, else 29500 + SLURM_JOB_ID % 1000.
func slurmRendezvous(l lookup, e *Env) error {
	listVar := "SLURM_STEP_NODELIST"
	list := l.get(listVar)
	if list == "" {
		listVar = "SLURM_JOB_NODELIST"
		list = l.get(listVar)
	}
	if list == "" {
		return errors.New("bootstrap: srun environment without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST; set SPARCML_ADDR=host:port")
	}
	host, err := firstNode(list)
	if err != nil {
		return fmt.Errorf("bootstrap: %s=%q: %v; set SPARCML_ADDR=host:port", listVar, list, err)
	}
	portSource := "SPARCML_PORT"
	port := countText(l.own.Port)
	if l.own.Port == 0 {
		job, err := strconv.ParseUint(l.get("SLURM_JOB_ID"), 10, 64)
		if err != nil {
			return fmt.Errorf("bootstrap: SLURM_JOB_ID=%q is not a number, so no default rendezvous port; set SPARCML_PORT or SPARCML_ADDR", l.get("SLURM_JOB_ID"))
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
func setToken(lk lookup, l launcher, e *Env) error {
	if t := lk.own.Token; t != "" {
		e.Token, e.TokenSource = []byte(t), "SPARCML_TOKEN"
		return nil
	}
	if l.derivedToken == nil {
		return fmt.Errorf("bootstrap: SPARCML_TOKEN is not set (the %s launcher always sets it; was the environment passed on?)", l.name)
	}
	token, source, ok := l.derivedToken(lk)
	if !ok {
		return fmt.Errorf("bootstrap: SPARCML_TOKEN is not set and %s", source)
	}
	e.Token, e.TokenSource = token, source
	return nil
}

func torchrunToken(l lookup) ([]byte, string, bool) {
	id := "torchrun:" + l.get("MASTER_ADDR") + ":" + l.get("MASTER_PORT") + ":" + l.get("TORCHELASTIC_RUN_ID")
	return []byte(id), "derived from MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RUN_ID (not secret; set SPARCML_TOKEN)", true
}

func mpirunToken(l lookup) ([]byte, string, bool) {
	id := "mpirun:" + l.own.Addr
	return []byte(id), "derived from SPARCML_ADDR (not secret; pass `-x SPARCML_TOKEN=...`)", true
}

func slurmToken(l lookup) ([]byte, string, bool) {
	job := l.get("SLURM_JOB_ID")
	if job == "" {
		return nil, "SLURM_JOB_ID is not set to derive one from", false
	}
	id := "srun:" + job + "." + l.get("SLURM_STEP_ID")
	return []byte(id), "derived from SLURM_JOB_ID and SLURM_STEP_ID (not secret; set SPARCML_TOKEN)", true
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
