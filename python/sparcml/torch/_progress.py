"""Completing torch Futures from sparcml requests.

sparcml's operations complete on their own; a request is only observed by
wait() or test(). A torch Future must complete without anyone waiting on
it (DDP chains .then() onto a hook's Future and waits much later), so one
daemon thread per communicator waits for the requests in the order they
were started (which is the order every rank started them in) and completes
each operation's Future and Work. sparcml_wait releases the GIL, so the
thread costs nothing while the operation runs. Requests are only ever
waited for by that thread: a Request is not safe to wait for from two.
"""

import queue
import threading
import weakref

import torch

_threads = weakref.WeakKeyDictionary()  # Comm -> _Progress
_lock = threading.Lock()


class Pending:
    """One operation in flight: its sparcml requests, what to run once they
    succeeded (copying results into the caller's tensors; returns the
    Future's value), and the Future and event completed then."""

    __slots__ = ["op", "requests", "finish", "future", "done", "error", "__weakref__"]

    def __init__(self, op, requests, finish):
        self.op, self.requests, self.finish = op, list(requests), finish
        self.future = torch.futures.Future()
        self.done = threading.Event()
        self.error = None

    def complete(self):
        try:
            for r in self.requests:
                r.wait()
            value = self.finish() if self.finish is not None else None
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits
            self.error = e
            self.requests = self.finish = None
            self.future.set_exception(e)
            self.done.set()
            return
        self.requests = self.finish = None
        self.done.set()
        self.future.set_result(value)

    def wait(self, timeout=None):
        """Blocks until the operation completed; raises its error."""
        if not self.done.wait(timeout):
            raise TimeoutError("sparcml: %s did not complete within %ss" % (self.op, timeout))
        if self.error is not None:
            raise self.error


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
            p.complete()


def submit(comm, op, requests, finish=None):
    """Hands requests started on comm to its progress thread; returns the
    Pending completed once they all have (and finish has run)."""
    p = Pending(op, requests, finish)
    with _lock:
        prog = _threads.get(comm)
        if prog is None:
            prog = _threads[comm] = _Progress(comm)
    prog.queue.put(p)
    return p


def completed(op, value=None, error=None):
    """A Pending already complete (an operation with nothing to send)."""
    p = Pending(op, (), None)
    if error is not None:
        p.error = error
        p.future.set_exception(error)
    else:
        p.future.set_result(value)
    p.done.set()
    return p
