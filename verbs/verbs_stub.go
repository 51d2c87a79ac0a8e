//go:build !linux || !cgo || sparcml_noverbs

package verbs

import "fmt"

// Built reports whether this binary was built with libibverbs.
const Built = false

// The stub: every entry point fails with ErrUnavailable, so callers need
// no build tags of their own. Handles cannot be created, so their methods
// are unreachable but still return the same error.

func devices() ([]string, error)                             { return nil, errNotBuilt }
func open(string) (*Context, error)                          { return nil, errNotBuilt }
func (c *Context) close() error                              { return nil }
func (c *Context) queryDevice() (DeviceAttr, error)          { return DeviceAttr{}, errNotBuilt }
func (c *Context) queryPort(uint8) (PortAttr, error)         { return PortAttr{}, errNotBuilt }
func (c *Context) queryGID(uint8, int) (GIDEntry, error)     { return GIDEntry{}, errNotBuilt }
func (c *Context) gidTable(uint8) ([]GIDEntry, error)        { return nil, errNotBuilt }
func (c *Context) allocPD() (*PD, error)                     { return nil, errNotBuilt }
func (c *Context) newCompChannel() (*CompChannel, error)     { return nil, errNotBuilt }
func (c *Context) newCQ(int, int, *CompChannel) (*CQ, error) { return nil, errNotBuilt }
func (ch *CompChannel) close() error                         { return nil }
func (pd *PD) close() error                                  { return nil }
func (pd *PD) regMR([]byte, Access) (*MR, error)             { return nil, errNotBuilt }
func (pd *PD) createQP(uint8, *CQ, *CQ, QPCaps) (*QP, error) { return nil, errNotBuilt }
func (m *MR) close() error                                   { return nil }
func (cq *CQ) poll([]WorkCompletion) (int, error)            { return 0, errNotBuilt }
func (cq *CQ) reqNotify(bool) error                          { return errNotBuilt }
func (cq *CQ) getEvent() (bool, error)                       { return false, errNotBuilt }
func (cq *CQ) close() error                                  { return nil }
func (qp *QP) toInit(Access) error                           { return errNotBuilt }
func (qp *QP) toRTR(RTRAttr) error                           { return errNotBuilt }
func (qp *QP) toRTS(RTSAttr) error                           { return errNotBuilt }
func (qp *QP) toError() error                                { return errNotBuilt }
func (qp *QP) state() (QPState, error)                       { return 0, errNotBuilt }
func (qp *QP) postSend([]SendWR) (int, error)                { return 0, errNotBuilt }
func (qp *QP) postRecv([]RecvWR) (int, error)                { return 0, errNotBuilt }
func (qp *QP) close() error                                  { return nil }

func wcStatusString(s WCStatus) string { return fmt.Sprintf("wc status %d", uint32(s)) }
