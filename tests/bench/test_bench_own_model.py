"""``lbtrain bench`` of the user's own model: a package written into a temporary folder (a
functional convnet with batch norm) benchmarked by reference from that folder, by a registered
name (an entry point of an installed package) at a shape and classes of one's own, from Python
(the step alone), under ``horovodrun``; a model whose step is cheaper than the input pipeline
that feeds it is labelled input-bound; every bad model refused in one line, exit code 2, before
anything runs."""

import csv
import json
import sys
from pathlib import Path

import pytest

from helpers import write_package as write_user_package
from lbtrain.bench import INPUT_BOUND_MARGIN, BenchError, Settings, WorldSpec, run_benchmark
from lbtrain.references import MODEL_REGISTRY

MODEL = "ownbench.models:build"


def write_package(folder: Path) -> Path:
    """``ownbench`` (the user's model factories of ``helpers.USER_MODELS``, good and bad) in ``folder``."""
    return write_user_package(folder, "ownbench", data=False)


@pytest.fixture(autouse=True)
def peak_in_this_process(monkeypatch):
    """The machine's matmul peak (what each row's ``peak_fraction`` divides by) measured in this
    process on 256 x 256 matrices, where the bench measures it in a fresh process on 2,048 x 2,048
    (a TensorFlow import and 400 GFLOP: 7 CPU-seconds, every bench run of this file paid them).
    The bench's own ``--peak`` child is tests/bench/test_bench.py's tiny matrix's; here the rows
    are still divided by a peak measured on this machine. Drops the ``ownbench`` modules a test
    imported into this process."""
    from lbtrain.bench import matmul_peak_flops

    monkeypatch.setattr("lbtrain.bench.matrix.measure_peak_flops", lambda: matmul_peak_flops(size=256, chain=2, repeats=2))
    yield
    for name in [name for name in sys.modules if name == "ownbench" or name.startswith("ownbench.")]:
        del sys.modules[name]


def read_rows(folder: Path) -> list[dict]:
    with open(folder / "bench.csv") as handle:
        return list(csv.DictReader(handle))


def conv_then_dense_mflops(input_shape: tuple, width: int, outputs: int) -> float:
    """Training MFLOPs per sample of ``build``/``binary``: 3 x 2 x the MACs of a 3x3 'same'
    convolution and the last Dense, by hand."""
    height, breadth, channels = input_shape
    return 6 * (height * breadth * 3 * 3 * channels * width + width * outputs) / 1e6


@pytest.mark.slow
def test_a_model_by_reference_is_benchmarked_from_the_users_folder(tmp_path, lbtrain_here):
    # In this process, as from the user's folder (its children start there); a fresh process
    # would only add its TensorFlow import.
    write_package(tmp_path)
    result = lbtrain_here("bench", "--models", MODEL, "--batches", "8", "--worlds", "single,simulated:2", "--steps", "3",
                          "--warmup", "1", "--output", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_rows(tmp_path / "out")
    assert [(row["model"], row["world"], row["status"]) for row in rows] == [(MODEL, "single", "ok"), (MODEL, "simulated:2", "ok")]
    assert all(float(row["images_per_second"]) > 0 and float(row["peak_fraction"]) > 0 for row in rows)
    assert {(row["input_shape"], row["classes"]) for row in rows} == {("28x28x1", "10")}
    assert float(rows[0]["train_mflops_per_sample"]) == pytest.approx(conv_then_dense_mflops((28, 28, 1), 8, 10))
    assert float(rows[0]["scaling_efficiency"]) == 1.0
    assert [row["model"] for row in json.loads((tmp_path / "out" / "bench.json").read_text())["rows"]] == [MODEL, MODEL]
    assert (tmp_path / "out" / "bench.png").stat().st_size > 0
    table = result.stdout.splitlines()
    assert table[1].split()[:3] == [MODEL, "8", "single"] and table[2].split()[:3] == [MODEL, "8", "simulated:2"]


@pytest.mark.slow
def test_a_step_cheaper_than_its_input_pipeline_is_labelled_input_bound(tmp_path, lbtrain_here):
    """Large images (384x384x3, 1.7 MiB a sample): the pipeline gathers every byte of each batch,
    ``glance`` reads one pixel. Idle, the pipeline delivers about a tenth of the step's images/s;
    30 steps keep a stall of the loaded machine from deciding the label."""
    write_package(tmp_path)
    glance = "ownbench.models:glance"
    result = lbtrain_here("bench", "--models", glance, "--input-shape", "384,384,3", "--batches", "16", "--worlds", "single",
                          "--steps", "30", "--warmup", "2", "--output", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    [row] = read_rows(tmp_path / "out")
    assert row["bound"] == "input-bound", row
    assert float(row["pipeline_images_per_second"]) < INPUT_BOUND_MARGIN * float(row["images_per_second"])
    assert "input-bound" in result.stdout.splitlines()[1]


@pytest.mark.slow
def test_a_registered_name_is_benchmarked_at_the_shape_and_classes_asked_for(tmp_path, monkeypatch, lbtrain_here):
    """An installed package's entry point (group ``lbtrain.models``) on the path (and on the
    bench's children's PYTHONPATH), run from another folder; a single sigmoid output for 2
    classes trains with binary cross-entropy. In this process: a fresh one would only add its
    TensorFlow import (the entry point is read from ``sys.path`` either way)."""
    site = write_package(tmp_path / "site")
    info = site / "ownbench-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ownbench\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[lbtrain.models]\nownbench-binary = ownbench.models:binary\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    # The registry keeps the entry point it loads: forget it after this test, as the path does.
    monkeypatch.setattr(MODEL_REGISTRY, "_functions", dict(MODEL_REGISTRY._functions))
    result = lbtrain_here("bench", "--models", "ownbench-binary", "--input-shape", "12,12,2", "--classes", "2", "--batches", "4",
                          "--worlds", "simulated:2", "--steps", "2", "--warmup", "1", "--output", str(tmp_path / "out"),
                          cwd=elsewhere)
    assert result.returncode == 0, result.stderr[-3000:]
    [row] = read_rows(tmp_path / "out")
    assert (row["model"], row["input_shape"], row["classes"], row["world"], row["status"]) == \
        ("ownbench-binary", "12x12x2", "2", "simulated:2", "ok")
    assert float(row["images_per_second"]) > 0
    assert float(row["train_mflops_per_sample"]) == pytest.approx(conv_then_dense_mflops((12, 12, 2), 8, 1))
    assert json.loads((tmp_path / "out" / "bench.json").read_text())["settings"]["input_shape"] == [12, 12, 2]


def test_from_python_a_factory_is_benchmarked_by_its_reference(tmp_path, monkeypatch):
    write_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))  # the bench's children import it too
    from ownbench.models import build

    report = run_benchmark([build], [4], [WorldSpec("single")], Settings(steps=2, warmup_steps=1, classes=3, input_pipeline=False),
                           output=tmp_path / "out")
    [row] = report["rows"]
    assert (row["model"], row["input_shape"], row["classes"], row["status"]) == (MODEL, "28x28x1", 3, "ok")
    assert row["images_per_second"] > 0
    [written] = read_rows(tmp_path / "out")
    assert written["model"] == MODEL
    # The step alone: no pipeline, no fed step, no bound.
    assert [written[key] for key in ("pipeline_images_per_second", "fed_images_per_second", "bound")] == ["", "", ""]


def test_from_python_a_lambda_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(BenchError, match=r"^model '.*<lambda>' can be built only in this process .* define it in a module"):
        run_benchmark([lambda input_shape, num_classes: None], [4], [WorldSpec("single")], Settings(steps=2),
                      output=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.horovod
@pytest.mark.slow
def test_horovod_ranks_resolve_the_reference_from_the_users_folder(tmp_path, lbtrain_here):
    write_package(tmp_path)
    result = lbtrain_here("bench", "--models", MODEL, "--batches", "8", "--worlds", "horovod:2", "--steps", "2",
                          "--warmup", "1", "--output", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    [row] = read_rows(tmp_path / "out")
    assert (row["model"], row["world"], row["processes"], row["status"]) == (MODEL, "horovod:2", "2", "ok")
    assert float(row["images_per_second"]) > 0


BAD_MODELS = {
    "does not import": (["--models", "mlp,nopkg.models:build"],
                        "model 'nopkg.models:build': importing nopkg.models failed (ModuleNotFoundError: No module named "
                        "'nopkg'); put its folder on PYTHONPATH or run from the folder that holds it"),
    "no such function": (["--models", "ownbench.models:biuld"],
                         "model 'ownbench.models:biuld': ownbench.models has no 'biuld' (did you mean 'build'? it defines: "),
    "unknown name": (["--models", "vgg16"], "unknown model 'vgg16' (allowed: mlp, cnn, resnet, vit, resnet50"),
    "factory raises": (["--models", "ownbench.models:broken"],
                       "model 'ownbench.models:broken' raised ValueError building for input shape (28, 28, 1) and 10 outputs: "
                       "cannot build for this shape (the bench's synthetic data: --input-shape, --classes)"),
    "returns no model": (["--models", "ownbench.models:nothing"],
                         "model 'ownbench.models:nothing' returned a NoneType, not a keras.Model"),
    "output too wide": (["--models", "ownbench.models:wide", "--classes", "4"],
                        "model 'ownbench.models:wide' has 7 outputs but the bench's synthetic labels are 4 classes; make its "
                        "last layer Dense(4) or run with --classes 7"),
    "input it cannot take": (["--models", "keras.applications.MobileNetV2"],
                             "model 'keras.applications.MobileNetV2' raised ValueError building for input shape (28, 28, 1)"),
    "subclassed with batch norm": (["--models", "ownbench.models:subclassed", "--worlds", "single,simulated:2"],
                                   "'ownbench.models:subclassed' in a simulated world: model 'subclassed' is a subclassed "
                                   "Subclassed with batch norm"),
    "one class": (["--models", MODEL, "--classes", "1"], "classes=1: the synthetic labels need at least 2 classes"),
    "bad shape": (["--models", MODEL, "--input-shape", "32,x"], "argument --input-shape: expected a whole number >= 1, got 'x'"),
}


# The bench builds the models it must check in a fresh process (lbtrain.bench.cases.check_models_fit:
# lbtrain.bench.measure.check_job in a child); that child, its one result line and the error read
# from it are this case's. The other cases that reach the check run check_job in this process,
# sparing each a process's TensorFlow import (3 to 4 CPU-seconds) to say the same line.
CHECKED_IN_A_CHILD = "output too wide"


def check_in_this_process(command: list[str], env: dict | None = None) -> dict:
    """``lbtrain.bench.processes.run_child`` for the bench's ``--check`` child, run here."""
    from lbtrain.bench.measure import check_job

    flag, job = command[-2:]
    assert flag == "--check", command
    return check_job(json.loads(job))


@pytest.mark.parametrize("case", BAD_MODELS)
def test_a_model_that_cannot_be_benchmarked_is_one_line_exit_2_and_nothing_written(case, tmp_path, lbtrain_here, monkeypatch):
    if case != CHECKED_IN_A_CHILD:
        monkeypatch.setattr("lbtrain.bench.cases.run_child", check_in_this_process)
    write_package(tmp_path)
    arguments, message = BAD_MODELS[case]
    result = lbtrain_here("bench", *arguments, "--batches", "4", "--steps", "2", "--output", "out", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"lbtrain: error: {message}")
    assert not (tmp_path / "out").exists()
