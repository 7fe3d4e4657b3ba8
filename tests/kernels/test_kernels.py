"""lbtrain.kernels: the compiled ghost batch norm against a NumPy reference and against lbtrain's
TensorFlow ops (values and gradients), where it is not used (XLA, SavedModel traces), and its
build's failures."""

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from helpers import run_python
from lbtrain import kernels, layers
from lbtrain.layers import GhostBatchNormalization

EPSILON = 1e-3


@pytest.fixture(scope="module")
def compiled():
    """The kernels, built here if ``make setup`` has not built them from the current source
    (skipped only where no compiler exists; a failing compile fails the tests)."""
    try:
        kernels.build()
    except kernels.KernelBuildError as error:
        if "no C++ compiler" not in str(error):
            raise
        pytest.skip(str(error))
    ops = kernels.ghost_batch_norm_ops()
    assert ops is not None
    return ops


def _inputs(seed: int = 0, shape=(4, 3, 5, 7)):
    """``[b, G, S, C]`` away from zero mean and unit variance, and per-channel scale and offset."""
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=shape) * 2.5 + 3.0).astype(np.float32)
    scale, offset = (rng.normal(size=shape[-1]).astype(np.float32) for _ in range(2))
    return x, scale, offset


@pytest.mark.parametrize("shape, shift", [((4, 3, 5, 7), 3.0), ((2, 2, 40000, 3), 100.0)], ids=["small", "large images"])
def test_the_forward_pass_equals_a_numpy_reference(compiled, shape, shift):
    """Large images: 80,000 values a group far from zero mean, summed in float chunks, in double across them."""
    x, scale, offset = _inputs(shape=shape)
    x += shift - 3.0
    y, mean, variance = (t.numpy() for t in compiled.lbtrain_ghost_batch_norm(x, scale, offset, epsilon=EPSILON))
    wide = x.astype(np.float64)
    want_mean = wide.mean(axis=(0, 2))  # per group and channel: [G, C]
    want_variance = wide.var(axis=(0, 2))
    want_y = (wide - want_mean[None, :, None]) / np.sqrt(want_variance[None, :, None] + EPSILON) * scale + offset
    np.testing.assert_allclose(mean, want_mean, rtol=1e-6)
    np.testing.assert_allclose(variance, want_variance, rtol=1e-6)
    np.testing.assert_allclose(y, want_y, atol=2e-6)


@pytest.mark.parametrize("shape", [(4, 3, 5, 7), (8, 16, 1, 3), (2, 5, 49, 32), (2, 3, 600, 4)],
                         ids=["small", "dense", "conv", "more positions than a float chunk"])
def test_values_and_gradients_equal_the_tensorflow_ops(compiled, shape):
    x, scale, offset = _inputs(1, shape)
    upstream = np.random.default_rng(2).normal(size=shape).astype(np.float32)

    def run(implementation, *extra):
        variables = [tf.Variable(value) for value in (x, scale, offset)]
        with tf.GradientTape() as tape:
            y, mean, variance = implementation(*extra, *variables, EPSILON)
            loss = tf.reduce_sum(y * upstream)
        return [t.numpy() for t in (y, mean, variance, *tape.gradient(loss, variables))]

    got = run(layers._ghost_batch_norm_compiled, compiled)
    want = run(layers._ghost_batch_norm_ops)
    for name, a, b in zip(("y", "mean", "variance", "dx", "d_scale", "d_offset"), got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5, err_msg=name)


def test_the_layers_traced_step_uses_the_kernel_and_its_xla_step_the_ops_with_equal_results(compiled):
    layer = GhostBatchNormalization(virtual_batch_size=4)
    x = _inputs(3, (16, 6, 6, 5))[0]
    layer.build(x.shape)
    eager = layer(x, training=True).numpy()
    compiled_step = tf.function(lambda inputs: layer(inputs, training=True), jit_compile=True)
    under_xla = compiled_step(tf.constant(x)).numpy()  # a kernel inside an XLA cluster would not compile
    np.testing.assert_allclose(under_xla, eager, atol=2e-5)
    traced = tf.function(lambda inputs: layer(inputs, training=True)).get_concrete_function(tf.TensorSpec(x.shape))
    assert "LbtrainGhostBatchNorm" in {op.type for op in traced.graph.get_operations()}


def test_a_savedmodel_holds_no_kernel_and_loads_where_lbtrain_is_not_imported(compiled, tmp_path):
    inputs = tf.keras.Input((6, 6, 5))
    model = tf.keras.Model(inputs, GhostBatchNormalization(virtual_batch_size=2)(inputs))
    path = str(tmp_path / "saved")
    tf.saved_model.save(model, path)
    assert b"LbtrainGhostBatchNorm" not in (tmp_path / "saved" / "saved_model.pb").read_bytes()
    loaded = run_python("import sys, tensorflow as tf; tf.saved_model.load(sys.argv[1]); "
                        "print(any(name.startswith('lbtrain') for name in sys.modules))", path)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.split() == ["False"]


def test_without_a_library_for_this_tensorflow_the_layer_runs_on_its_ops(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(kernels, "library_path", lambda: tmp_path / "ghost_batch_norm-tf0.0.so")
    kernels.ghost_batch_norm_ops.cache_clear()
    try:
        with caplog.at_level(logging.DEBUG, logger="lbtrain.kernels"):
            assert kernels.ghost_batch_norm_ops() is None
            layer = GhostBatchNormalization(virtual_batch_size=2)
            layer.build((8, 3, 4))
            traced = tf.function(lambda inputs: layer(inputs, training=True))
            graph = traced.get_concrete_function(tf.TensorSpec((8, 3, 4))).graph
    finally:
        kernels.ghost_batch_norm_ops.cache_clear()
    assert "LbtrainGhostBatchNorm" not in {op.type for op in graph.get_operations()}
    assert "ghost_batch_norm-tf0.0.so is not built (python -m lbtrain.kernels builds it)" in caplog.text


@pytest.mark.parametrize("compiler, message", [
    ("/nonexistent/c++", "no C++ compiler '/nonexistent/c++' on PATH (set CXX, or install g++)"),
    ("false", "compiling ghost_batch_norm.cc failed (false exit 1): (no output)"),
])
def test_a_build_that_cannot_compile_is_one_line_and_leaves_no_library(tmp_path, monkeypatch, capsys, compiler, message):
    target = tmp_path / "ghost_batch_norm-tf0.0.so"
    monkeypatch.setattr(kernels, "library_path", lambda: target)
    monkeypatch.setenv("CXX", compiler)
    assert kernels.main() == 1
    assert capsys.readouterr().err.strip().startswith(f"lbtrain.kernels: {message}")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_the_library_cannot_be_written_to_is_one_line(monkeypatch, capsys):
    # /proc refuses new folders even to root, who can write anywhere else (here: no such folder).
    monkeypatch.setattr(kernels, "library_path", lambda: Path("/proc/lbtrain-kernels/ghost_batch_norm-tf0.0.so"))
    assert kernels.main() == 1
    assert capsys.readouterr().err.strip().startswith("lbtrain.kernels: cannot write the library into /proc/lbtrain-kernels (")


# Fewer groups than threads: each group's channels are split between threads (the kernel's
# for_each_piece). A fresh process, since a pytest-xdist worker computes on one thread.
FEW_GROUPS = """
import json, sys
import numpy as np
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(4)
from lbtrain import kernels, layers
ops = kernels.ghost_batch_norm_ops()
close = True
for shape in [(8, 1, 30, 13), (4, 2, 300, 6), (16, 3, 1, 5)]:
    rng = np.random.default_rng(sum(shape))
    values = [rng.normal(size=shape).astype(np.float32) * 2 + 1, rng.normal(size=shape[-1]).astype(np.float32),
              rng.normal(size=shape[-1]).astype(np.float32)]
    upstream = rng.normal(size=shape).astype(np.float32)
    results = []
    for implementation, extra in ((layers._ghost_batch_norm_compiled, (ops,)), (layers._ghost_batch_norm_ops, ())):
        variables = [tf.Variable(value) for value in values]
        with tf.GradientTape() as tape:
            outputs = implementation(*extra, *variables, 1e-3)
            loss = tf.reduce_sum(outputs[0] * upstream)
        results.append([t.numpy() for t in (*outputs, *tape.gradient(loss, variables))])
    close = close and all(np.allclose(a, b, rtol=1e-4, atol=2e-5) for a, b in zip(*results))
print(json.dumps({"threads": tf.config.threading.get_intra_op_parallelism_threads(), "close": close}))
"""


def test_fewer_groups_than_threads_split_the_channels_with_equal_results(compiled):
    completed = run_python(FEW_GROUPS)
    assert completed.returncode == 0, completed.stderr[-2000:]
    result = json.loads(completed.stdout.splitlines()[-1])
    assert result == {"threads": 4, "close": True}  # the tolerance of the test on one thread above


def test_a_library_older_than_its_source_is_a_warning_and_unused(tmp_path, monkeypatch, caplog):
    """As after upgrading lbtrain: the source is newer than the library built from the old one."""
    stale = tmp_path / "ghost_batch_norm-tf0.0.so"
    stale.write_bytes(b"")
    os.utime(stale, (0, 0))
    monkeypatch.setattr(kernels, "library_path", lambda: stale)
    kernels.ghost_batch_norm_ops.cache_clear()
    try:
        with caplog.at_level(logging.DEBUG, logger="lbtrain.kernels"):
            assert kernels.ghost_batch_norm_ops() is None
    finally:
        kernels.ghost_batch_norm_ops.cache_clear()
    assert [(record.levelname, record.getMessage()) for record in caplog.records] == [
        ("WARNING", "ghost batch norm on TensorFlow ops: ghost_batch_norm-tf0.0.so is older than its source "
                    "(python -m lbtrain.kernels builds it)")]
