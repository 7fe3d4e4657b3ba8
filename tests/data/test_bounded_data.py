"""Data and models sized before they are allocated, and ``.npz`` files whose headers lie: one
bounded line, exit 2, before anything trains or is created (a traceback or an out-of-memory
kill before)."""

import io
import re
import zipfile

import numpy as np
import pytest
import yaml

from helpers import snapshot

BASE = {"name": "bounded", "lr": {"base_lr": 0.1, "base_batch": 16}, "training": {"per_worker_batch": 16, "epochs": 1},
        "model": {"name": "mlp", "options": {"widths": [8]}}}


def _refused(lbtrain_here, folder, settings, pattern, *flags):
    (folder / "exp.yaml").write_text(yaml.safe_dump({**BASE, "output_dir": str(folder / "results"), **settings}))
    before = snapshot(folder)
    completed = lbtrain_here("run", "exp.yaml", *flags, cwd=folder)
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 300, completed.stderr
    assert re.fullmatch(f"lbtrain: error: {pattern}", lines[0]), lines[0]
    assert snapshot(folder) == before and not (folder / "results").exists()


@pytest.mark.parametrize("options, pattern", [
    ({"num_samples": 1_000_000_000}, r"mnist1d: num_samples must be an integer from 10 to 200000, got 1000000000"),
    ({"generator_seed": -1}, r"mnist1d: generator_seed must be an integer from 0 to 4294967295, got -1"),
    ({"generator_seed": 2**40}, r"mnist1d: generator_seed must be an integer from 0 to 4294967295, got 1099511627776"),
])
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_generated_mnist1d_options_are_checked_before_generating(tmp_path, lbtrain_here, options, pattern, dry_run):
    _refused(lbtrain_here, tmp_path, {"data": {"dataset": "mnist1d", "options": options}}, f"data.options: {pattern} \\(grid point base\\)",
             *(["--dry-run"] if dry_run else []))


def test_synthetic_data_larger_than_memory_is_refused_before_allocation(tmp_path, lbtrain_here):
    _refused(lbtrain_here, tmp_path, {"data": {"dataset": "synthetic", "options": {"train_size": 10**12, "input_shape": [1000]}}},
             r"data.options: synthetic: 1e\+15 generated values need about \d+\.\d GiB of memory, more than the "
             r"\d+\.\d GiB available here; ask for fewer samples \(grid point base\)", "--dry-run")


def test_a_zoo_model_larger_than_memory_is_refused_before_it_is_built(tmp_path, lbtrain_here):
    _refused(lbtrain_here, tmp_path, {"data": {"dataset": "mnist1d", "train_subset": 64, "options": {"num_samples": 500}},
                                      "model": {"name": "mlp", "options": {"widths": [100_000_000, 100_000_000]}}},
             r"model 'mlp': its 1e\+16 weights \(with gradients and optimizer state\) need about \d+\.\d GiB of memory, "
             r"more than the \d+\.\d GiB available here; make it smaller \(model.options\) or check the number of classes "
             r"\(10\) \(run base, world size 1\)")


def _lying_npz(path, count):
    """A stored (uncompressed) .npz whose x_train header promises ``count`` float64 values and holds 8."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (count,)})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("x_train.npy", header.getvalue() + np.zeros(8).tobytes())
        labels = io.BytesIO()
        np.save(labels, np.arange(8) % 2)
        archive.writestr("y_train.npy", labels.getvalue())


@pytest.mark.parametrize("case, pattern", [
    ("empty", r"dataset 'data.npz': not a readable .npz file \(BadZipFile: File is not a zip file\)"),
    ("lying header", r"dataset 'data.npz': x_train's header promises shape \(1000000000000,\) of float64 \(8000000000000 bytes\) "
                     r"but it holds \d+; the file is damaged"),
    ("huge label", r"dataset 'data.npz': y_train holds the label 2147483647; class labels are 0 to num_classes - 1, at most "
                   r"1000000 classes \(relabel ids with np.unique\(y, return_inverse=True\)\)"),
])
def test_an_npz_that_lies_or_names_a_huge_class_is_one_line(tmp_path, lbtrain_here, case, pattern):
    path = tmp_path / "data.npz"
    if case == "empty":
        path.write_bytes(b"")
    elif case == "lying header":
        _lying_npz(path, 10**12)
        assert path.stat().st_size < 700
    else:
        labels = np.arange(64) % 2
        labels[3] = 2**31 - 1
        np.savez(path, x_train=np.random.default_rng(0).normal(size=(64, 4)), y_train=labels)
    _refused(lbtrain_here, tmp_path, {"data": {"dataset": "data.npz"}}, f"{pattern} \\(run base, world size 1\\)")


@pytest.mark.parametrize("options, message", [
    ({"widths": [1] * 65}, r"widths must be a list of at most 64 positive integers, got \[1, 1, 1, .*\]"),
])
def test_a_zoo_model_of_too_many_layers_is_refused_at_validation(tmp_path, lbtrain_here, options, message):
    _refused(lbtrain_here, tmp_path, {"data": {"dataset": "mnist1d", "train_subset": 64, "options": {"num_samples": 500}},
                                      "model": {"name": "mlp", "options": options}},
             f"model.options: {message} \\(grid point base\\)", "--dry-run")


def test_a_resnet_of_too_many_blocks_is_refused_at_validation(tmp_path, lbtrain_here):
    _refused(lbtrain_here, tmp_path, {"data": {"dataset": "mnist1d", "train_subset": 64, "options": {"num_samples": 500}},
                                      "model": {"name": "resnet", "options": {"widths": [1], "blocks_per_stage": 10**6}}},
             r"model.options: blocks_per_stage must be an integer from 1 to 64, got 1000000 \(grid point base\)", "--dry-run")
