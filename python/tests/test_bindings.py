"""The NumPy bindings and the DDP hooks: each rank program on 3 ranks."""

import os

import pytest

from conftest import REPO, SPARCML_BIN, launch, run_script


def test_collectives():
    launch("collectives.py", 3)


def test_compressor():
    launch("compressor.py", 3)


def test_loading():
    stage = os.environ.get("SPARCML_STAGE", os.path.join(REPO, "build", "stage"))
    if not os.path.exists(os.path.join(stage, "lib", "libsparcml.so")):
        pytest.fail("%s has no installed library: run `make install PREFIX=%s`" % (stage, stage))
    run_script("loading.py", SPARCML_BIN, stage)


def test_crash():
    run_script("crash.py")


def test_torch_hooks():
    launch("torch_hooks.py", 3, timeout=600)


def test_example_train():
    launch(os.path.join(REPO, "examples", "pytorch", "train.py"), 2, "--epochs", "1", "--limit", "3000", timeout=600)
