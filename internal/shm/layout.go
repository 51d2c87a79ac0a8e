package shm

// Each rank maps one shared "inbox" (a memfd, passed to its peers over
// their unix socket) into which its peers write, and maps the inbox of
// every peer on its host, into which it writes. An inbox holds:
//
//	offset          size       contents
//	0               4096       control: seq (u32 at 0), the futex word that
//	                           anyone with news for the owner bumps; awake
//	                           (u32 at 64), how many of the owner's
//	                           goroutines are polling (peers skip the futex
//	                           wake while it is not zero); closed (u32 at
//	                           128), set when the owner closes.
//	4096 + i*region region     one per peer on the host, i its index among
//	                           the owner's peers (ascending rank):
//	  +0            4096         head (u64 at 0, written by the peer), tail
//	                             (u64 at 64, written by the owner),
//	                             wantSpace (u32 at 128: the peer waits for
//	                             room), and rndvSlots slot words (u32 each
//	                             from 256) for the owner's single-copy
//	                             sends to that peer;
//	  +4096         RingSize     the ring the peer writes to the owner.
//
// The head and tail count bytes since the start and are never reset; a
// byte's place in the ring is its count modulo RingSize. Each word that
// two processes write sits on a cache line of its own.
const (
	pageSize  = 4096
	offSeq    = 0
	offAwake  = 64
	offClosed = 128

	offHead      = 0
	offTail      = 64
	offWantSpace = 128
	offSlots     = 256

	rndvSlots = 64 // single-copy sends in flight to one peer
)

func regionSize(ringSize int) int { return pageSize + ringSize }

func inboxSize(peers, ringSize int) int { return pageSize + peers*regionSize(ringSize) }

func regionOffset(index, ringSize int) int { return pageSize + index*regionSize(ringSize) }

// A slot word describes one single-copy send: its generation (counting
// the slot's uses, so a stale rendezvous frame cannot touch a later send)
// and its state. The sender offers its buffers (slotOffered) and announces
// them in a rendezvous frame; the receiver moves the slot to slotPulling
// before it reads them, so that a sender that gives up (Close, Abort)
// either withdraws the offer first (back to slotIdle: the receiver's move
// fails and it reads nothing) or knows that a read is under way and waits
// for it; the receiver marks it slotDone once the payload is in place (or
// the message was dropped), and the sender's send completes.
const (
	slotIdle    = 0
	slotOffered = 1
	slotPulling = 2
	slotDone    = 3

	genBits = 30
)

func slotWord(gen uint32, state uint32) uint32 { return gen<<2 | state }

func slotGen(w uint32) uint32   { return w >> 2 }
func slotState(w uint32) uint32 { return w & 3 }

// localIndex is the index of peer among owner's peers on the host:
// peers is every rank on the host, ascending, owner included.
func localIndex(peers []int, owner, peer int) int {
	i := 0
	for _, r := range peers {
		if r == peer {
			return i
		}
		if r != owner {
			i++
		}
	}
	return -1
}
