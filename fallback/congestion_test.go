package fallback

import (
	"net"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCongestionChoices(t *testing.T) {
	cases := []struct {
		policy, current string
		sameHost        bool
		want            []string
		strict          bool
	}{
		{"auto", "bbr", true, []string{"cubic", "reno"}, false},
		{"auto", "bbr3", true, []string{"cubic", "reno"}, false},
		{"auto", "bbr", false, nil, false}, // a real network: the admin's choice
		{"auto", "cubic", true, nil, false},
		{"system", "bbr", true, nil, false},
		{"reno", "bbr", false, []string{"reno"}, true},
		{"reno", "reno", true, nil, true},
	}
	for _, c := range cases {
		try, strict := congestionChoices(c.policy, c.current, c.sameHost)
		if !slices.Equal(try, c.want) || strict != c.strict {
			t.Errorf("congestionChoices(%q, %q, %v) = %v, %v; want %v, %v", c.policy, c.current, c.sameHost, try, strict, c.want, c.strict)
		}
	}
}

func TestSameHost(t *testing.T) {
	addr := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 1} }
	require.True(t, sameHost(addr("127.0.0.1"), addr("127.0.0.1")))
	require.True(t, sameHost(addr("10.0.0.5"), addr("10.0.0.5")))
	require.True(t, sameHost(addr("::1"), addr("::1")))
	require.False(t, sameHost(addr("10.0.0.5"), addr("10.0.0.6")))
}

func TestCongestionPolicyChecked(t *testing.T) {
	for _, bad := range []string{"bbr cubic", "a/b", "averyveryverylongname"} {
		_, err := Config{Rank: 0, Size: 1, Token: testToken, Congestion: bad}.withDefaults()
		require.ErrorContains(t, err, "congestion control", "policy %q", bad)
	}
	cfg, err := Config{Rank: 0, Size: 1, Token: testToken, Congestion: "reno"}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, "reno", cfg.Congestion)
	cfg, err = Config{Rank: 0, Size: 1, Token: testToken}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, CongestionAuto, cfg.Congestion)
}
