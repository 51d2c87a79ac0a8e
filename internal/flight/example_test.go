package flight_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/sparcml/sparcml/internal/flight"
)

// Each rank of a job run with SPARCML_DUMP_DIR writes its flight recorder
// there on a timeout, a failure or SIGUSR1; ReadDump reads one
// file and WriteView merges them (what `sparcml trace` prints).
func ExampleWriteView() {
	dumps := []string{
		`{"version":1,"rank":0,"size":3,"host":"node1","pid":10,"time":"2026-01-02T03:04:05Z","reason":"timeout","started":8,
		  "ops":[{"seq":8,"kind":"allreduce","count":1024,"dtype":"float32","algo":"ring","peer":2,"state":"failed",
		          "start":"2026-01-02T03:03:57Z","end":"2026-01-02T03:04:05Z","error":"context deadline exceeded"}],
		  "peers":[{"rank":2,"started":7,"silent_ms":8500}]}`,
		`{"version":1,"rank":1,"size":3,"host":"node2","pid":11,"time":"2026-01-02T03:04:05Z","reason":"timeout","started":8,
		  "ops":[{"seq":8,"kind":"allreduce","peer":-1,"state":"started","start":"2026-01-02T03:03:57Z"}]}`,
	}
	var ds []*flight.Dump
	for _, s := range dumps {
		d, err := flight.ReadDump(strings.NewReader(s))
		if err != nil {
			fmt.Println(err)
			return
		}
		ds = append(ds, d)
	}
	if err := flight.WriteView(os.Stdout, ds); err != nil {
		fmt.Println(err)
	}
	// Output:
	// job of 3 ranks, 2 dumps; the furthest rank started seq 8
	// no dump from rank 2
	// silent (no progress published for over 2s when another rank dumped): rank 2 (for 8.5s, at seq 7)
	//
	// rank  started  oldest unfinished              dump
	// 0     8        allreduce seq 8 (failed)       timeout on node1:10 at 2026-01-02T03:04:05Z
	// 1     8        allreduce seq 8 (in flight)    timeout on node2:11 at 2026-01-02T03:04:05Z
	// 2     -        -                              none
	//
	// rank 0, last 1 operations:
	//   seq 8      allreduce      failed  1024 x float32 algo ring took 8s peer 2: context deadline exceeded
	//
	// rank 1, last 1 operations:
	//   seq 8      allreduce      started waiting 8s
}
