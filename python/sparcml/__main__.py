"""`python -m sparcml ...` runs the sparcml command (the launcher and its
tools: `python -m sparcml run -n 4 -- python train.py`), as the `sparcml`
binary does: the one built into this package, else bin/sparcml of the
source tree, else `sparcml` on PATH."""

import os
import shutil
import sys

_here = os.path.dirname(os.path.abspath(__file__))


def command():
    for path in (os.path.join(_here, "bin", "sparcml"), os.path.join(_here, "..", "..", "bin", "sparcml")):
        if os.access(path, os.X_OK):
            return os.path.abspath(path)
    found = shutil.which("sparcml")
    if found and os.path.realpath(found) != os.path.realpath(sys.argv[0]):
        return found
    raise SystemExit("sparcml: the sparcml command was not found (build the package with Go, or `make build`)")


def main():
    cmd = command()
    os.execv(cmd, [cmd, *sys.argv[1:]])


if __name__ == "__main__":
    main()
