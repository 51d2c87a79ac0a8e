"""The exceptions of sparcml: one class per status code of the C ABI.

Every exception carries the rank that raised it, the peer involved (-1 if
none), the operation and its sequence number, as the library reported
them; str() is the library's full message.
"""

import ctypes


class Error(Exception):
    """A sparcml operation failed."""

    code = None

    def __init__(self, message, rank=-1, peer=-1, op="", seq=0):
        super().__init__(message)
        self.message, self.rank, self.peer, self.op, self.seq = message, rank, peer, op, seq


class InvalidArgument(Error, ValueError):
    """An argument is invalid on this rank (wrong dtype, non-contiguous or
    read-only array, out-of-range index or root). The operation failed on
    every rank."""

    code = 1


class Mismatch(Error):
    """The ranks called different collectives, or the same one with
    different lengths, dtypes, reductions or roots."""

    code = 2


class PeerLost(Error, ConnectionError):
    """A peer died or closed its connection; the communicator is unusable."""

    code = 3


class Timeout(Error, TimeoutError):
    """The operation's deadline (SPARCML_TIMEOUT) passed; it failed."""

    code = 4


class Aborted(Error):
    """abort() was called here or on a peer, or another rank failed this
    operation (its reason is in the message)."""

    code = 5


class Closed(Error):
    """The communicator was finalized."""

    code = 6


class InitError(Error):
    """init() failed: environment, rendezvous or connection set-up."""

    code = 7


class NotDone(Error, TimeoutError):
    """Request.wait's timeout passed first; the operation continues and the
    request stays valid."""

    code = 8


class OutOfMemory(Error, MemoryError):
    code = 9


class InternalError(Error):
    """A bug in sparcml: please report it with the message."""

    code = 10


_BY_CODE = {c.code: c for c in (InvalidArgument, Mismatch, PeerLost, Timeout, Aborted, Closed,
                                InitError, NotDone, OutOfMemory, InternalError)}


def from_last_error(so, status):
    """The exception for status, from this thread's last error record."""
    from ._lib import ErrorInfo
    info = ErrorInfo()
    so.sparcml_last_error_info(ctypes.byref(info))
    cls = _BY_CODE.get(status, InternalError)
    msg = (info.message or b"").decode("utf-8", "replace")
    if info.code != status:  # should not happen: the call that failed records its error
        msg = "sparcml: status %d (%s)" % (status, so.sparcml_status_name(status).decode())
    return cls(msg, info.rank, info.peer, (info.op or b"").decode("utf-8", "replace"), info.seq)
