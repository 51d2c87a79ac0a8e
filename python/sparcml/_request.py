"""Requests: operations started with Comm.start_*."""

import ctypes

from . import errors
from ._lib import lib


class Request:
    """An operation in flight. It completes on its own; wait() or test()
    observe it. The arrays it uses are kept alive (and must not be touched)
    until then; a request dropped while pending is waited for first, so its
    buffers are never freed under the operation."""

    def __init__(self, handle, op, arrays, value=None, collect=None, release=None):
        self._handle = handle  # a ctypes c_void_p holding the sparcml_request *
        self.op = op
        self._arrays = arrays  # kept alive until the operation completes
        self._value = value  # what wait() returns
        self._collect = collect  # or computes it, once, on success
        self._release = release  # frees what the operation held, whatever its outcome
        self._done = False
        self._error = None

    def wait(self, timeout=None):
        """Waits for the operation and returns its result (the output array,
        or (indices, values) of a sparse allreduce). With a timeout in
        seconds, raises sparcml.NotDone if it passes first (the operation
        continues and the request stays valid); the operation's own failure
        raises its sparcml.Error."""
        if not self._done:
            so = lib()
            t = -1.0 if timeout is None else max(0.0, float(timeout))
            rc = so.sparcml_wait(ctypes.byref(self._handle), t)
            if rc == errors.NotDone.code:
                raise errors.from_last_error(so, rc)
            self._finish(so, rc)
        if self._error is not None:
            raise self._error
        return self._value

    def test(self):
        """True once the operation has completed (raising its error if it
        failed), False while it is in flight."""
        if not self._done:
            so = lib()
            done = ctypes.c_int(0)
            rc = so.sparcml_test(ctypes.byref(self._handle), ctypes.byref(done))
            if rc == 0 and not done.value:
                return False
            self._finish(so, rc)
        if self._error is not None:
            raise self._error
        return True

    @property
    def done(self):
        """Whether wait() or test() has seen the operation complete."""
        return self._done

    def _finish(self, so, rc):
        self._done = True
        try:
            if rc != 0:
                self._error = errors.from_last_error(so, rc)
            elif self._collect is not None:
                self._value = self._collect()
        finally:
            self._arrays = self._collect = None
            if self._release is not None:
                self._release()
                self._release = None

    def __del__(self):
        if not getattr(self, "_done", True):
            try:
                self.wait()
            except Exception:  # noqa: BLE001 - a finalizer has no one to report to
                pass

    def __repr__(self):
        return "<sparcml.Request %s %s>" % (self.op, "done" if self._done else "pending")
