"""Tests of sparcml.Compressor, run on every rank:

    sparcml run -n 3 --timeout 5m -- /usr/bin/python3 python/tests/ranks/compressor.py

Every rank replays every rank's top-k with error feedback in NumPy (the
accumulation, the selection by magnitude with ties to the lower index,
the residual) and checks the library's average and residual against it.
"""

import math

import numpy as np

import sparcml
from harness import check_usable, expect_raises, rng, run


def gradient(name, rank, step, n, dtype):
    """Multiples of 1/256 in [-8, 8]: every sum the test makes is exact."""
    return (rng("%s/%d" % (name, step), rank).integers(-2048, 2049, size=n) / 256.0).astype(dtype)


def select_count(n, density):
    x = density * n
    return min(n, math.ceil(x - 1e-9 * max(1.0, x)))


class Reference:
    """Every rank's compressor state, replayed."""

    def __init__(self, size, n, density, error_feedback, dtype):
        self.k = select_count(n, density)
        self.ef = error_feedback
        self.residual = [np.zeros(n, dtype) for _ in range(size)]
        self.sent = [None] * size

    def step(self, grads):
        for r, g in enumerate(grads):
            acc = self.residual[r] + g if self.ef else g.copy()
            top = np.argsort(-np.abs(acc), kind="stable")[:self.k]
            sent = np.zeros_like(acc)
            sent[top] = acc[top]
            acc[top] = 0
            self.sent[r] = sent
            if self.ef:
                self.residual[r] = acc
        return np.sum(self.sent, axis=0, dtype=np.float64) / len(grads)


def check_against_reference(comm, name, n, dtype, density, error_feedback, quant, steps):
    comp = sparcml.Compressor(comm, density=density, quant=quant, error_feedback=error_feedback)
    ref = Reference(comm.size, n, density, error_feedback, dtype)
    for t in range(steps):
        g = gradient(name, comm.rank, t, n, dtype)
        address = g.ctypes.data
        assert comp.reduce(g) is g and g.ctypes.data == address, "not in place"
        want = ref.step([gradient(name, r, t, n, dtype) for r in range(comm.size)])
        if quant is None:
            np.testing.assert_allclose(g, want, rtol=1e-6 if dtype == np.float32 else 1e-14, atol=1e-12,
                                       err_msg="%s step %d" % (name, t))
        else:
            # Each encoding on the way errs by at most one step of a scale
            # no larger than the sum of the ranks' largest values sent.
            levels = {"fp16": 2048, "bf16": 256, "q8": 127, "q4": 7, "q2": 1}[quant]
            scale = sum(np.abs(s).max() for s in ref.sent)
            bound = 1.01 * comm.size * scale / levels
            assert np.abs(g - want).max() <= bound, "%s step %d: error %g > %g" % (
                name, t, np.abs(g - want).max(), bound)
            union = np.any([s != 0 for s in ref.sent], axis=0)
            assert not g[~union].any(), "%s: values where no rank sent anything" % name
        # The residual is exact, encoded or not (the encoding's error is
        # not fed back).
        np.testing.assert_array_equal(comp.residual(), ref.residual[comm.rank], err_msg="%s residual" % name)
    comp.close()


def test_topk_error_feedback(comm):
    check_against_reference(comm, "ef32", 1000, np.float32, 0.1, True, None, 3)
    check_against_reference(comm, "ef64", 5000, np.float64, 0.02, True, None, 2)
    check_against_reference(comm, "noef", 777, np.float32, 0.05, False, None, 2)
    check_against_reference(comm, "large", 300000, np.float32, 0.01, True, None, 2)


def test_quantized(comm):
    for q in ["fp16", "bf16", "q8", "q4", "q2"]:
        check_against_reference(comm, "quant " + q, 2000, np.float32, 0.2, True, q, 2)


def test_density_one_is_the_dense_average(comm):
    comp = sparcml.Compressor(comm, density=1.0)
    for t in range(2):
        g = gradient("dense", comm.rank, t, 1000, np.float32)
        dense = comm.allreduce(g.copy(), op="avg")
        comp.reduce(g)
        np.testing.assert_allclose(g, dense, rtol=1e-6)
        assert not comp.residual().any()
    comp.close()


def test_conservation_of_every_method(comm):
    """What the ranks sent (size times the averages) plus what they kept is
    the sum of every gradient given."""
    n, steps = 20000, 3
    for method in ["exact", "sampled", "reuse", "random"]:
        comp = sparcml.Compressor(comm, density=0.05, method=method)
        given, sent = np.zeros(n), np.zeros(n)
        for t in range(steps):
            given += sum(gradient(method, r, t, n, np.float32).astype(np.float64) for r in range(comm.size))
            g = gradient(method, comm.rank, t, n, np.float32)
            sent += comp.reduce(g) * comm.size
        kept = comm.allreduce(comp.residual().astype(np.float64))
        np.testing.assert_allclose(sent + kept, given, rtol=1e-5, atol=1e-4, err_msg=method)
        assert 0 < np.count_nonzero(sent) < n, method
        comp.close()


def test_global_scope(comm):
    """scope="global": the first step, an exact global selection, keeps the
    k largest magnitudes of the ranks' summed selections (ties to the lower
    index) and puts each rank's dropped entries back into its residual, as
    replayed here; the later steps keep about k entries and conserve the
    gradient (what was kept plus the residuals is what was given)."""
    n, density, steps = 20000, 0.05, 3
    comp = sparcml.Compressor(comm, density=density, scope="global")
    ref = Reference(comm.size, n, density, True, np.float32)
    given, sent = np.zeros(n), np.zeros(n)
    for t in range(steps):
        grads = [gradient("global", r, t, n, np.float32) for r in range(comm.size)]
        given += sum(g.astype(np.float64) for g in grads)
        g = grads[comm.rank].copy()
        comp.reduce(g)
        sent += g.astype(np.float64) * comm.size
        if t == 0:
            ref.step(grads)
            sums = np.sum(ref.sent, axis=0, dtype=np.float32)
            nonzero = np.flatnonzero(sums)
            order = nonzero[np.lexsort((nonzero, -np.abs(sums[nonzero])))]
            kept = np.zeros(n, bool)
            kept[order[:ref.k]] = True
            want = np.where(kept, sums / np.float32(comm.size), 0).astype(np.float32)
            np.testing.assert_array_equal(g, want, err_msg="global step 0")
            residual = ref.residual[comm.rank] + np.where(kept, 0, ref.sent[comm.rank])
            np.testing.assert_array_equal(comp.residual(), residual, err_msg="global step 0 residual")
        else:
            assert ref.k / 2 < np.count_nonzero(g) < 2 * ref.k, "global step %d kept %d" % (t, np.count_nonzero(g))
    kept = comm.allreduce(comp.residual().astype(np.float64))
    np.testing.assert_allclose(sent + kept, given, rtol=1e-5, atol=1e-4, err_msg="global conservation")
    comp.close()


def test_bad_arguments(comm):
    bad = 1
    g = np.ones(100, np.float32)
    for kwargs, want in [({"density": 0.0}, sparcml.InvalidArgument), ({"density": 2.0}, sparcml.InvalidArgument),
                         ({"quant": "q3"}, sparcml.InvalidArgument), ({"method": "best"}, sparcml.InvalidArgument),
                         ({"scope": "local"}, sparcml.InvalidArgument)]:
        comp = sparcml.Compressor(comm, **(kwargs if comm.rank == bad else {}))
        expect_raises(comm, lambda: comp.reduce(g), bad, want, "compressor-create")
    # A wrong first array on one rank.
    comp = sparcml.Compressor(comm)
    arg = np.ones(100, np.float16) if comm.rank == bad else g
    expect_raises(comm, lambda: comp.reduce(arg), bad, sparcml.InvalidArgument, "compressor-create")
    # Valid but different: every rank fails.
    comp = sparcml.Compressor(comm, density=0.2 if comm.rank == bad else 0.1)
    try:
        comp.reduce(g)
    except sparcml.Mismatch as e:
        assert "density" in str(e), str(e)
    else:
        raise AssertionError("different densities did not raise")
    check_usable(comm)
    # Once created: wrong length, dtype or layout on one rank.
    comp = sparcml.Compressor(comm, density=0.1)
    comp.reduce(g.copy())
    for arg in [np.ones(99, np.float32), np.ones(100, np.float64), np.ones((100, 2), np.float32)[:, 0]]:
        a = arg if comm.rank == bad else g.copy()
        expect_raises(comm, lambda: comp.reduce(a), bad, sparcml.InvalidArgument, "sparse-allreduce")
    comp.close()
    comp.close()


if __name__ == "__main__":
    run([test_topk_error_feedback, test_quantized, test_density_one_is_the_dense_average,
         test_conservation_of_every_method, test_global_scope, test_bad_arguments])
