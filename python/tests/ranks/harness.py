"""A minimal multi-rank test runner (Debian's python3 has no pytest).

Every rank runs the same tests in the same order. A test is a function
taking the communicator; a failed assertion or an unexpected exception is
reported with the rank and the test's name, and the run goes on. At the
end the ranks agree on the number of failures (an allreduce), so every
rank exits non-zero if any rank failed. The launcher's --timeout and
SPARCML_TIMEOUT bound every run.
"""

import os
import sys
import time
import traceback
import zlib

import numpy as np

import sparcml


def rng(test, rank):
    """The generator of one rank's input to one test: every rank can
    recompute every other rank's input."""
    return np.random.default_rng([zlib.crc32(test.encode()), rank])


def small_ints(test, rank, n, dtype):
    """Small integers, so that sums are exact in any order of reduction."""
    return rng(test, rank).integers(-8, 9, size=n).astype(dtype)


def expect_raises(comm, fn, bad, want_bad, op):
    """Runs fn, a collective called badly on rank bad (or on every rank if
    bad is None): it must raise want_bad there and a sparcml.Error naming
    the bad rank on the others, each carrying this rank and op."""
    try:
        fn()
    except sparcml.Error as e:
        err = e
    else:
        check_usable(comm)  # in step with the other ranks, which go on
        raise AssertionError("rank %d: %s did not raise" % (comm.rank, op))
    check_usable(comm)
    assert err.rank == comm.rank, "error rank %d, want %d: %s" % (err.rank, comm.rank, err)
    assert err.op == op, "error op %r, want %r: %s" % (err.op, op, err)
    assert "rank %d" % comm.rank in str(err), str(err)
    if bad is None or comm.rank == bad:
        assert isinstance(err, want_bad), "%s, want %s: %s" % (type(err).__name__, want_bad.__name__, err)
    else:
        assert isinstance(err, (sparcml.Aborted, sparcml.Mismatch, sparcml.InvalidArgument)), repr(err)
        assert "rank %d" % bad in str(err), "the error does not name rank %d: %s" % (bad, err)
        assert 0 <= err.peer < comm.size and err.peer != comm.rank, "peer %d: %s" % (err.peer, err)
    return err


def check_usable(comm):
    """The communicator still reduces correctly."""
    x = np.array([comm.rank, 1.0])
    comm.allreduce(x)
    assert x[0] == comm.size * (comm.size - 1) / 2 and x[1] == comm.size, x


def run(tests, after=()):
    """Runs tests (then, once the ranks agreed, the tests in after, which
    may break the communicator) and exits with the result."""
    comm = sparcml.init()
    failures = 0
    for t in tests:
        start = time.monotonic()
        try:
            t(comm)
        except Exception:  # noqa: BLE001 - every failure is reported and counted
            failures += 1
            print("FAIL rank %d %s:\n%s" % (comm.rank, t.__name__, traceback.format_exc()), file=sys.stderr)
        if os.environ.get("SPARCML_TEST_VERBOSE"):
            print("rank %d %s %.3fs" % (comm.rank, t.__name__, time.monotonic() - start), file=sys.stderr)
    total = comm.allreduce(np.array([failures], dtype=np.float64))[0]
    if comm.rank == 0:
        print("%s: %d tests on %d ranks: %s" % (os.path.basename(sys.argv[0]), len(tests), comm.size,
                                               "FAILED" if total else "every test passed on every rank"))
    for t in after:
        try:
            t(comm)
        except Exception:  # noqa: BLE001
            failures += 1
            print("FAIL rank %d %s:\n%s" % (comm.rank, t.__name__, traceback.format_exc()), file=sys.stderr)
    try:
        comm.finalize()
    except sparcml.Error as e:
        if not after:
            raise
        print("rank %d: finalize after %s: %s" % (comm.rank, after[-1].__name__, e), file=sys.stderr)
    sys.exit(1 if total or failures else 0)
