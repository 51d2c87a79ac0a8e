"""Completing Works and torch Futures from sparcml requests.

Every operation starts its sparcml requests on the calling thread, in the
order the application issues it, which is the order every rank starts it
in. sparcml's operations then complete on their own; a request is only
observed by wait() or test(). Who observes it:

- Work.wait() on the calling thread waits for the requests itself
  (sparcml_wait releases the GIL). This is the common path (every blocking
  torch.distributed call ends in work.wait()) and it involves no other
  thread: a hand-over to a thread and back costs hundreds of microseconds
  on a small operation (python/tools/call_bench.py).
- A torch Future must complete with no one waiting on it (DDP chains
  .then() onto a hook's Future and waits much later), so get_future(),
  and a Work dropped before completion, hand the operation to the
  communicator's progress thread, a daemon that waits for what it was
  handed in that order and completes it.

One thread at a time owns an operation's requests (a Request is not safe
to wait for from two): whoever claims it first waits; the other waits for
the operation's done event.
"""

import queue
import sys
import threading
import time
import weakref

import torch

import sparcml

_threads = weakref.WeakKeyDictionary()  # Comm -> _Progress
_lock = threading.Lock()


class Pending:
    """One operation in flight: its sparcml requests, what to run once they
    succeeded (copying results into the caller's tensors; returns the
    operation's value), and its outcome once complete."""

    __slots__ = ["comm", "op", "requests", "finish", "value", "error", "done", "_future", "_lock", "_owned",
                 "_handed", "__weakref__"]

    def __init__(self, comm, op, requests, finish):
        self.comm, self.op, self.requests, self.finish = comm, op, list(requests), finish
        self.value = self.error = self._future = None
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._owned = False  # a thread is waiting for the requests
        self._handed = False  # the progress thread is to complete it

    # ---- completion, by the thread that owns the requests ----

    def _claim(self):
        with self._lock:
            return self._claim_locked()

    def _release(self):
        """Gives the requests back (a wait that timed out); hands them to
        the progress thread if a Future was asked for meanwhile."""
        with self._lock:
            self._owned = False
            hand = self._handed and self._claim_locked()
        if hand:
            _enqueue(self)

    def _claim_locked(self):
        if self._owned or self.done.is_set():
            return False
        self._owned = True
        return True

    def _complete(self, timeout=None):
        """Waits for the requests (at most timeout seconds: raises
        sparcml.NotDone, the operation still owned by no one, if it
        passes), runs finish, and publishes the outcome."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for r in self.requests:  # a request already complete returns at once
                r.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            value = self.finish() if self.finish is not None else None
            error = None
        except sparcml.NotDone:
            self._release()
            raise
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits
            value, error = None, e
        with self._lock:
            self.value, self.error = value, error
            self.requests = self.finish = None
            self._owned = False
            self.done.set()
            fut = self._future
        if fut is not None:
            _settle(fut, value, error)

    def poll(self):
        """Completes the operation here if its requests have (never blocks);
        True once it is complete."""
        if self.done.is_set():
            return True
        if not self._claim():
            return self.done.is_set()
        try:
            finished = all(r.test() for r in self.requests)
        except BaseException:  # noqa: BLE001 - the failure is completed below
            finished = True
        if not finished:
            self._release()
            return False
        self._complete()
        return True

    # ---- what Work and the hooks use ----

    def wait(self, timeout=None):
        """Blocks until the operation completed (waiting for its requests
        here unless another thread already is); raises its error, or
        TimeoutError if timeout seconds pass first."""
        if not self.done.is_set():
            if self._claim():
                try:
                    self._complete(timeout)
                except sparcml.NotDone:
                    raise TimeoutError("sparcml: %s did not complete within %ss" % (self.op, timeout)) from None
            elif not self.done.wait(timeout):
                raise TimeoutError("sparcml: %s did not complete within %ss" % (self.op, timeout))
        if self.error is not None:
            raise self.error
        return self.value

    @property
    def future(self):
        """A torch Future completed with the operation's value (or error)
        without anyone waiting: asking for it hands the operation to the
        progress thread."""
        with self._lock:
            fut = self._future
            if fut is None:
                fut = self._future = torch.futures.Future()
                if self.done.is_set():
                    _settle(fut, self.value, self.error)
                    return fut
                self._handed = True
                hand = self._claim_locked()
            else:
                hand = False
        if hand:
            _enqueue(self)
        return fut

    def __del__(self):
        # A Work dropped before it completed (dist.isend without keeping
        # the handle): the progress thread finishes it, so that the
        # requests' buffers stay alive and no one blocks here.
        # At interpreter exit no thread can start: each request waits for
        # its operation in its own finalizer instead.
        try:
            if self.requests and not sys.is_finalizing() and not self.done.is_set() and self._claim():
                _enqueue(self)
        except Exception:  # noqa: BLE001 - a finalizer has no one to report to
            pass


def _settle(fut, value, error):
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


class _Progress:
    def __init__(self, comm):
        self.queue = queue.SimpleQueue()
        name = "sparcml-progress-rank%d" % comm.rank
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            p = self.queue.get()
            if p is None:
                return
            p._complete()
            del p


def _enqueue(p):
    """Hands p, owned by the caller, to its communicator's progress thread."""
    with _lock:
        prog = _threads.get(p.comm)
        if prog is None:
            prog = _threads[p.comm] = _Progress(p.comm)
    prog.queue.put(p)


def submit(comm, op, requests, finish=None):
    """The Pending of requests just started on comm, completed once they all
    have (and finish has run) by whichever thread waits for it first."""
    return Pending(comm, op, requests, finish)


class Completed:
    """An operation already complete (run by a blocking call, or with
    nothing to send): what Pending offers, without a lock or an event of
    its own."""

    __slots__ = ["op", "value", "error", "_future"]
    done = threading.Event()
    done.set()

    def __init__(self, op, value=None, error=None):
        self.op, self.value, self.error, self._future = op, value, error, None

    def wait(self, timeout=None):
        if self.error is not None:
            raise self.error
        return self.value

    def poll(self):
        return True

    @property
    def future(self):
        if self._future is None:
            self._future = torch.futures.Future()
            _settle(self._future, self.value, self.error)
        return self._future


def completed(op, value=None, error=None):
    """An operation already complete (value or error)."""
    return Completed(op, value, error)
