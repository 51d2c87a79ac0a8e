package sparcml_test

import (
	"fmt"

	"github.com/sparcml/sparcml"
)

// Where the ranks run: Init learns every rank's host (machine and network
// namespace) through the rendezvous store; ranks on one host reach each
// other through shared memory. A Local job runs in one process, so on one
// host.
func ExampleComm_LocalRanks() {
	comms, _ := sparcml.Local(4)
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	c := comms[2]
	fmt.Println("host", c.Host(), "of", c.Hosts(), "with ranks", c.LocalRanks(), "; rank 3 on host", c.HostOf(3))
	// Output: host 0 of 1 with ranks [0 1 2 3] ; rank 3 on host 0
}
