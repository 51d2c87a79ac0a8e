package sparcml

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SPARCML_DEBUG and SPARCML_DEBUG_SUBSYS decide which lines WithLogger
// gets; each is prefixed with host, pid and rank.
func TestTraceLinesByLevelAndSubsystem(t *testing.T) {
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	for _, tc := range []struct {
		debug, subsys string
		traced        bool
	}{
		{"TRACE", "", true},
		{"trace", "coll", true},
		{"TRACE", "init,coll", true},
		{"TRACE", "^coll", false},
		{"TRACE", "tcp", false},
		{"INFO", "ALL", false},
		{"", "", false},
		{"NONE", "", false},
	} {
		t.Run(tc.debug+"/"+tc.subsys, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("SPARCML_DEBUG", tc.debug)
			t.Setenv("SPARCML_DEBUG_SUBSYS", tc.subsys)
			var log lineLog
			comms, err := Local(3, WithLogger(log.logf))
			require.NoError(t, err)
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			errs := onEveryRank(t, comms, 10*time.Second, func(ctx context.Context, c *Comm) error {
				return Allreduce(ctx, c, make([]float64, 1000), Sum)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			lines := log.matching("allreduce seq 1")
			if !tc.traced {
				assert.Empty(t, log.String(), "nothing else is logged by a local job")
				return
			}
			require.Len(t, lines, 3, log.String())
			for r := range 3 {
				re := regexp.MustCompile(fmt.Sprintf(`^%s:%d \[%d\] sparcml TRACE coll: allreduce seq 1: 1000 x float64 \(8000 bytes\), algo \S+, \S+, sent \d+ bytes$`,
					regexp.QuoteMeta(host), os.Getpid(), r))
				assert.Len(t, filterRegexp(lines, re), 1, "rank %d's line in:\n%s", r, strings.Join(lines, "\n"))
			}
		})
	}
}

func filterRegexp(lines []string, re *regexp.Regexp) []string {
	var out []string
	for _, l := range lines {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// WithLogger(nil) discards every line whatever the level.
func TestNilLogger(t *testing.T) {
	clearEnv(t)
	t.Setenv("SPARCML_DEBUG", "TRACE")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var log lineLog
	c, err := Init(ctx, WithLogger(nil))
	require.NoError(t, err)
	require.NoError(t, Allreduce(ctx, c, []float32{1}, Sum))
	c.Close()
	assert.Empty(t, log.String())
}

// A SPARCML_* variable the library does not declare (a typing mistake)
// gets one warning at Init naming the closest declared one, and a removed
// one names its replacement; Init goes on.
func TestUnknownVariableWarning(t *testing.T) {
	clearEnv(t)
	t.Setenv("SPARCML_TIMEOT", "1m")
	t.Setenv("SPARCML_LOG", "off")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var log lineLog
	c, err := Init(ctx, WithLogger(log.logf))
	require.NoError(t, err)
	c.Close()
	typo := log.matching(`SPARCML_TIMEOT`)
	require.Len(t, typo, 1, log.String())
	assert.Regexp(t, `WARN env: SPARCML_TIMEOT is not a sparcml variable and is ignored; did you mean SPARCML_TIMEOUT\?$`, typo[0])
	removed := log.matching(`SPARCML_LOG`)
	require.Len(t, removed, 1, log.String())
	assert.Contains(t, removed[0], "SPARCML_LOG is no longer read: use SPARCML_DEBUG=NONE")
}

// At the default level a job writes its start-up line on rank 0 and
// nothing else.
func TestDefaultLevelStartUpLineOnly(t *testing.T) {
	clearEnv(t)
	var log lineLog
	comms := initJob(t, 3, WithLogger(log.logf))
	errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		return Allreduce(ctx, c, make([]float32, 1<<16), Sum)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	closeAll(comms)
	lines := log.matching("")
	require.Len(t, lines, 1, log.String())
	assert.Regexp(t, `^\S+:\d+ \[0\] sparcml version .*: 3 ranks, transport tcp, launcher options, ready in `, lines[0])
}
