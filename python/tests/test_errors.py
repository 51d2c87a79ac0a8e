"""The exceptions map the C ABI's status codes 1:1: every error status of
include/sparcml.h has exactly one class, named after it, and an error is
raised as the class of its status, never by its text. No library needed.

    .venv/bin/python -m pytest python/tests/test_errors.py
"""

import os
import re
import sys
import types

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(here))
# The package without its __init__ (which needs NumPy): errors and _lib
# need only ctypes.
_pkg = types.ModuleType("sparcml")
_pkg.__path__ = [os.path.join(repo, "python", "sparcml")]
sys.modules.setdefault("sparcml", _pkg)

from sparcml import errors  # noqa: E402

# The class of each status, by the status's name in the header.
NAMES = {"INVALID": "InvalidArgument", "MISMATCH": "Mismatch", "PEER_LOST": "PeerLost",
         "TIMEOUT": "Timeout", "ABORTED": "Aborted", "CLOSED": "Closed", "INIT": "InitError",
         "NOT_DONE": "NotDone", "NOMEM": "OutOfMemory", "INTERNAL": "InternalError"}


def header_statuses():
    with open(os.path.join(repo, "include", "sparcml.h")) as f:
        text = f.read()
    enum = re.search(r"typedef enum \{(.*?)\} sparcml_status;", text, re.S).group(1)
    return {name: int(value) for name, value in re.findall(r"SPARCML_ERR_(\w+) = (\d+)", enum)}


def test_every_status_has_its_class():
    statuses = header_statuses()
    assert set(statuses) == set(NAMES), sorted(statuses)
    assert set(errors._BY_CODE) == set(statuses.values()), sorted(errors._BY_CODE)
    for name, code in statuses.items():
        cls = errors._BY_CODE[code]
        assert cls.__name__ == NAMES[name] and cls.code == code, (name, code, cls)
        assert issubclass(cls, errors.Error)


class FakeLib:
    """The two functions from_last_error calls, answering a fixed record."""

    def __init__(self, code, message):
        self.code, self.message = code, message

    def sparcml_last_error_info(self, ref):
        info = ref._obj
        info.code, info.rank, info.peer, info.seq = self.code, 2, 1, 7
        info.op, info.message = b"allreduce", self.message

    def sparcml_status_name(self, status):
        return b"SPARCML_ERR_%d" % status


def test_raised_by_status_not_text():
    for code, cls in errors._BY_CODE.items():
        # A message quoting another status's words changes nothing.
        e = errors.from_last_error(FakeLib(code, b"sparcml: rank 2: failed by rank 1: collective mismatch"), code)
        assert type(e) is cls, (code, type(e))
        assert (e.rank, e.peer, e.op, e.seq) == (2, 1, "allreduce", 7), vars(e)
    e = errors.from_last_error(FakeLib(99, b"from a newer library"), 99)
    assert type(e) is errors.InternalError, type(e)


if __name__ == "__main__":
    test_every_status_has_its_class()
    test_raised_by_status_not_text()
    print("ok")
