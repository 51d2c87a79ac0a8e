"""Builds the sparcml wheel: the Python package, plus libsparcml.so and the
sparcml launcher compiled with Go from the repository this directory is
in (pyproject.toml holds the metadata).

The library is built as `make lib` builds it: -buildmode=c-shared,
exporting exactly include/sparcml.h's functions, its version (git
describe, or $SPARCML_VERSION) linked into internal/version with -X, as
the Makefile does, which sparcml.__version__ reads back through
sparcml_build_version. $GO names the go command (default: go on
PATH, then /usr/local/go/bin/go). No network is used beyond what go needs
for the module's dependencies (the Go proxy, or a filled module cache).
"""

import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
HEADER = os.path.join(REPO, "include", "sparcml.h")


def describe():
    """The library's version: $SPARCML_VERSION, else `git describe` of the
    repository (the Makefile's VERSION), else "dev"."""
    v = os.environ.get("SPARCML_VERSION")
    if v:
        return v
    try:
        return subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"], capture_output=True,
                              text=True, check=True).stdout.strip() or "dev"
    except (OSError, subprocess.CalledProcessError):
        return "dev"


def version_ldflags(version):
    """-X flags setting internal/version, the one source of the build's
    version (the Makefile's VERSION_LDFLAGS)."""
    var = "github.com/sparcml/sparcml/internal/version."
    flags = "-X %sVersion=%s" % (var, version)
    try:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = ""
    return flags + (" -X %sCommit=%s" % (var, commit) if commit else "")


def abi():
    text = open(HEADER).read()
    major = re.search(r"#define SPARCML_VERSION_MAJOR (\d+)", text).group(1)
    minor = re.search(r"#define SPARCML_VERSION_MINOR (\d+)", text).group(1)
    return major, minor


def package_version():
    """A PEP 440 version: the ABI's major.minor, and git describe as the
    local part (sparcml.__version__ is the describe string itself)."""
    major, minor = abi()
    local = re.sub(r"[^A-Za-z0-9]+", ".", describe()).strip(".")
    return "%s.%s+%s" % (major, minor, local) if local and local != "dev" else "%s.%s" % (major, minor)


def go():
    g = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(g) and not shutil.which(g):
        raise SystemExit("sparcml: building the wheel needs Go (set GO to the go command)")
    return g


class BuildWithGo(build_py):
    """build_py, then libsparcml.so and bin/sparcml into the package."""

    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "sparcml")
        os.makedirs(os.path.join(pkg, "bin"), exist_ok=True)
        version = describe()
        major, _ = abi()
        tags = [] if os.path.exists("/usr/include/infiniband/verbs.h") else ["-tags", "sparcml_noverbs"]
        exports = subprocess.run(["bash", os.path.join(REPO, "capi", "exports.sh"), HEADER], capture_output=True,
                                 text=True, check=True).stdout
        mapfile = os.path.join(os.path.abspath(self.build_lib), "..", "sparcml.map")
        with open(mapfile, "w") as f:
            f.write(exports)
        lib = os.path.abspath(os.path.join(pkg, "libsparcml.so"))
        ldflags = '%s -extldflags "-Wl,--version-script=%s -Wl,-soname,libsparcml.so.%s"' % (
            version_ldflags(version), os.path.abspath(mapfile), major)
        self.announce("sparcml: go build ./capi -> %s" % lib, level=2)
        subprocess.run([go(), "build", *tags, "-buildmode=c-shared", "-ldflags", ldflags, "-o", lib, "./capi"],
                       cwd=REPO, check=True)
        header = os.path.join(pkg, "libsparcml.h")  # cgo's own header: the ABI is include/sparcml.h
        if os.path.exists(header):
            os.remove(header)
        launcher = os.path.abspath(os.path.join(pkg, "bin", "sparcml"))
        subprocess.run([go(), "build", *tags, "-ldflags", version_ldflags(version), "-o", launcher,
                        "./cmd/sparcml"], cwd=REPO, check=True)


class BinaryDistribution(Distribution):
    """The wheel holds native code: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(version=package_version(), cmdclass={"build_py": BuildWithGo}, distclass=BinaryDistribution)
