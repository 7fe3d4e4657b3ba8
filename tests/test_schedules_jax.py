"""lbtrain's schedules inside Keras 3's compiled train step on JAX, with TensorFlow absent
(issue #53, items 1 and 2).

``Warmup``, ``PerUpdate``, ``ConstantLearningRate`` and ``build_schedule``'s decays are written in
``keras.ops`` (``lbtrain._keras.ops``), so they run inside ``jax.jit``; ``lbtrain.optimizers`` and
``lbtrain.schedules`` import no TensorFlow on Keras 3's JAX backend. Every check runs in one fresh
process of this interpreter with ``KERAS_BACKEND=jax`` and a ``sitecustomize`` placed first on
``PYTHONPATH`` that makes ``import tensorflow`` fail, as if TensorFlow were not installed:

- every schedule of tests/test_schedules.py (serialized here, on the TensorFlow backend) and
  every ``build_schedule`` decay under both clocks, evaluated under ``jax.jit`` and by
  ``schedule_values``, equals the NumPy references and this process's TensorFlow values;
- ``model.fit`` compiled on JAX with ``LARS(Warmup(...))``, ``SGD(build_schedule(...))`` and,
  under ``gradient_accumulation_steps``, ``SGD(PerUpdate(...))`` and LARS, ends at the weights the
  same fit reaches here on TensorFlow;
- the README's optimizer example trains;
- the TensorFlow-only parts (the trainer, ``lbtrain.train``) say in one line that TensorFlow is missing.

Runs on the Keras 3 stack with JAX installed; skips elsewhere, saying why.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from test_docs_examples import examples
from test_schedules import CASES

from helpers import REPO_ROOT, stderr_lines
from lbtrain._keras import KERAS_3
from lbtrain.errors import TENSORFLOW_MISSING
from lbtrain.recipe import DECAY_CLOCKS
from lbtrain.schedules import DECAYS, PerUpdate, build_schedule, schedule_values

pytestmark = [
    pytest.mark.skipif(not KERAS_3, reason="Keras 3's JAX backend: this interpreter is the tf.keras 2 stack (TensorFlow 2.15); "
                                           "run with .venv-keras3/bin/python"),
    pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                       reason="JAX is not installed next to this Keras 3: make setup-keras3 installs it "
                              "(.venv-keras3/bin/pip install jax jaxlib)"),
]

schedules = tf.keras.optimizers.schedules

# Run before anything else in the child: ``import tensorflow`` fails as it does where it is not installed.
NO_TENSORFLOW = "import sys\nsys.modules['tensorflow'] = None  # as if TensorFlow were not installed\n"


@pytest.fixture(scope="module")
def without_tensorflow(tmp_path_factory):
    """A folder holding that ``sitecustomize.py``, to put first on the child's ``PYTHONPATH``."""
    folder = tmp_path_factory.mktemp("no_tensorflow")
    (folder / "sitecustomize.py").write_text(NO_TENSORFLOW)
    return str(folder)


def run_jax_without_tensorflow(shim: str, code: str, job: dict) -> dict:
    """Runs ``code`` with ``job`` (JSON, as ``sys.argv[1]``) under ``KERAS_BACKEND=jax`` and no
    TensorFlow; returns the JSON it prints last."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": os.pathsep.join([shim, REPO_ROOT] + ([path] if path else []))}
    completed = subprocess.run([sys.executable, "-c", textwrap.dedent(code), json.dumps(job)], capture_output=True, text=True,
                               cwd=REPO_ROOT, timeout=300, env=env)
    assert completed.returncode == 0, "\n".join(stderr_lines(completed.stderr)[-40:])
    return json.loads(completed.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------- values under jax.jit

EVALUATE = """
    import json, sys
    assert sys.modules["tensorflow"] is None
    import jax
    import keras
    import numpy as np
    import lbtrain.schedules  # registers lbtrain's schedules with Keras
    from lbtrain.schedules import schedule_values

    job = json.loads(sys.argv[1])
    results = {"backend": keras.backend.backend()}
    for case, (config, steps, count) in job.items():
        schedule = keras.optimizers.schedules.deserialize(config)
        jitted = jax.jit(lambda step: schedule(step))
        results[case] = {"jit": [float(jitted(np.int64(step))) for step in steps],
                         "values": schedule_values(schedule, count).tolist(), "class": type(schedule).__name__}
    results["tensorflow_loaded"] = any(name.split(".")[0] == "tensorflow" and module is not None
                                       for name, module in sys.modules.items())
    print(json.dumps(results))
    """


def built_schedules() -> dict:
    """Every decay of ``DECAYS`` after a warmup under both clocks, and one wrapped in ``PerUpdate``."""
    specs = {"exponential": {"type": "exponential", "rate": 0.5, "staircase": True}, "step": {"type": "step", "boundaries": [3, 5]},
             "cosine": {"type": "cosine", "alpha": 0.1}, "polynomial": {"type": "polynomial", "power": 2.0}, "none": {"type": "none"}}
    assert set(specs) == set(DECAYS)
    built = {f"build {kind} {clock}": build_schedule({"rule": "sqrt", "warmup_epochs": 1.5, "decay": spec, "decay_clock": clock},
                                                     steps_per_epoch=10, base_lr=0.1, base_batch=32, global_batch=512, total_epochs=6)
             for kind, spec in specs.items() for clock in DECAY_CLOCKS}
    built["per update"] = PerUpdate(built["build cosine from_step_0"], 3)
    return built


@pytest.fixture(scope="module")
def evaluated(without_tensorflow):
    job = {f"case {case}": (schedules.serialize(schedule), steps, min(max(steps) + 1, 400))
           for case, (schedule, _, steps) in CASES.items()}
    job.update({case: (schedules.serialize(schedule), [0, 14, 15, 29, 30, 49, 50, 59, 60], 70)
                for case, schedule in built_schedules().items()})
    return run_jax_without_tensorflow(without_tensorflow, EVALUATE, job)


def test_the_child_ran_on_jax_without_tensorflow(evaluated):
    assert evaluated["backend"] == "jax"
    assert evaluated["tensorflow_loaded"] is False


@pytest.mark.parametrize("case", CASES)
def test_every_schedule_matches_the_numpy_reference_inside_jax_jit(case, evaluated):
    schedule, reference, steps = CASES[case]
    got = evaluated[f"case {case}"]
    assert got["class"] == type(schedule).__name__
    # test_schedules.py's tolerance.
    np.testing.assert_allclose(got["jit"], [reference(step) for step in steps], rtol=1e-5)
    np.testing.assert_allclose(got["values"], [reference(step) for step in range(len(got["values"]))], rtol=1e-5)


@pytest.mark.parametrize("case", list(built_schedules()))
def test_every_built_schedule_on_jax_equals_its_tensorflow_values(case, evaluated):
    schedule = built_schedules()[case]
    got = evaluated[case]
    expected = schedule_values(schedule, 70)  # this process: Keras 3 on TensorFlow
    # float32 on both: a few units in the last place, and JAX's 1e-15 where TensorFlow's polynomial ends at 0.
    np.testing.assert_allclose(got["values"], expected, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(got["jit"], expected[[0, 14, 15, 29, 30, 49, 50, 59, 60]], rtol=1e-5, atol=1e-8)
    assert len(set(np.round(expected, 6))) > 2, "a schedule that never changes proves nothing"


# ------------------------------------------------------------- model.fit compiled on JAX

# Each case: the optimizer (an expression of ``lr``, the schedule) and its schedule, built the
# same way in the child (JAX) and here (TensorFlow). 32 samples, batch 8, 2 epochs: 8 batches.
FIT_CASES = {
    "LARS(Warmup(cosine))": ("LARS(lr, eta=0.1, weight_decay=1e-4)",
                             "Warmup(0.5, 4, after=keras.optimizers.schedules.CosineDecay(0.5, 8), start_lr=0.05)"),
    "SGD(build_schedule(step))": ("keras.optimizers.SGD(lr, momentum=0.9)",
                                  "build_schedule({'rule': 'linear', 'warmup_epochs': 1, 'decay': {'type': 'step', 'boundaries': [1.5]}}, "
                                  "steps_per_epoch=4, base_lr=0.02, base_batch=8, global_batch=32, total_epochs=2)"),
    "SGD(PerUpdate) accumulating 2": ("keras.optimizers.SGD(PerUpdate(lr, 2), momentum=0.9, gradient_accumulation_steps=2)",
                                      "build_schedule({'rule': 'linear', 'warmup_epochs': 1, 'decay': {'type': 'cosine'}}, "
                                      "steps_per_epoch=2, base_lr=0.02, base_batch=8, global_batch=32, total_epochs=2)"),
    "LARS(Warmup) accumulating 2": ("LARS(lr, eta=0.1, gradient_accumulation_steps=2)", "Warmup(0.5, 2, start_lr=0.05)"),
}

FIT = """
    import json, sys
    import keras
    import numpy as np
    from lbtrain.optimizers import LARS
    from lbtrain.schedules import PerUpdate, Warmup, build_schedule

    def fit(job, optimizer, schedule, jit_compile):
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
        model.set_weights([np.asarray(weight, np.float32) for weight in job["weights"]])
        lr = eval(schedule)
        model.compile(optimizer=eval(optimizer), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=jit_compile)
        history = model.fit(np.asarray(job["x"], np.float32), np.asarray(job["y"]), batch_size=8, epochs=2, shuffle=False,
                            verbose=0)
        return {"weights": [np.asarray(weight, np.float64).tolist() for weight in model.get_weights()],
                "loss": history.history["loss"], "iterations": int(model.optimizer.iterations), "jit": model.jit_compile}

    if __name__ == "__main__":
        job = json.loads(sys.argv[1])
        print(json.dumps({case: fit(job, optimizer, schedule, True) for case, (optimizer, schedule) in job["cases"].items()}))
    """


def fit_job() -> dict:
    rng = np.random.default_rng(0)
    weights = [rng.normal(0, 0.5, shape).tolist() for shape in [(6, 8), (8,), (8, 3), (3,)]]
    return {"weights": weights, "x": rng.standard_normal((32, 6)).tolist(), "y": rng.integers(0, 3, 32).tolist(),
            "cases": FIT_CASES}


@pytest.fixture(scope="module")
def fitted(without_tensorflow):
    job = fit_job()
    return job, run_jax_without_tensorflow(without_tensorflow, FIT, job)


@pytest.mark.parametrize("case", FIT_CASES)
def test_model_fit_compiled_on_jax_reaches_the_tensorflow_weights(case, fitted):
    job, results = fitted
    got = results[case]
    assert got["jit"] is True
    assert got["iterations"] == (4 if "accumulating" in case else 8)  # updates
    namespace: dict = {}
    exec(compile(textwrap.dedent(FIT), "FIT", "exec"), namespace)
    expected = namespace["fit"](job, *FIT_CASES[case], False)  # here: Keras 3 on TensorFlow
    assert expected["iterations"] == got["iterations"]
    for index, (jax_weight, tf_weight, start) in enumerate(zip(got["weights"], expected["weights"], job["weights"])):
        np.testing.assert_allclose(jax_weight, tf_weight, rtol=1e-5, atol=1e-6, err_msg=f"weight {index}")
        assert not np.allclose(jax_weight, start), f"weight {index} did not move"
    np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-5)


# ------------------------------------------------------------- the README's example

README_EXAMPLE = """
    import json, sys
    source = json.loads(sys.argv[1])
    exec(compile(source, "README.md", "exec"))
    print(json.dumps({"iterations": int(model.optimizer.iterations), "loss": model.history.history["loss"],
                      "backend": keras.backend.backend()}))
    """


def test_the_readmes_optimizer_example_trains_on_jax_without_tensorflow(without_tensorflow):
    [example] = [example for example in examples("README.md") if "from lbtrain.optimizers import LARS" in example.source]
    assert "model.fit(" in example.source
    result = run_jax_without_tensorflow(without_tensorflow, README_EXAMPLE, example.source)
    assert result["backend"] == "jax"
    assert result["iterations"] == 4  # 1024 samples in batches of 256
    assert np.isfinite(result["loss"]).all()


# ------------------------------------------------------------- what keeps requiring TensorFlow

REFUSALS = """
    import importlib, json, sys
    import lbtrain
    results = {}
    try:
        importlib.import_module("lbtrain.trainer")
    except ImportError as error:
        results["import lbtrain.trainer"] = [type(error).__name__, error.name, str(error)]
    for name in ("train", "LearningRateWarmup", "SimulatedWorld"):
        try:
            getattr(lbtrain, name)
        except ImportError as error:
            results[f"lbtrain.{name}"] = str(error)
    print(json.dumps(results))
    """


def test_the_tensorflow_parts_say_in_one_line_that_tensorflow_is_missing(without_tensorflow):
    results = run_jax_without_tensorflow(without_tensorflow, REFUSALS, {})
    kind, name, message = results.pop("import lbtrain.trainer")
    assert (kind, name) == ("ModuleNotFoundError", "tensorflow") and "\n" not in message
    assert results == dict.fromkeys(("lbtrain.train", "lbtrain.LearningRateWarmup", "lbtrain.SimulatedWorld"), TENSORFLOW_MISSING)
    assert "\n" not in TENSORFLOW_MISSING and "pip install" in TENSORFLOW_MISSING


def test_the_command_line_says_in_one_line_that_tensorflow_is_missing(without_tensorflow):
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": os.pathsep.join([without_tensorflow, REPO_ROOT])}
    completed = subprocess.run([sys.executable, "-m", "lbtrain.cli", "run", "experiments/adam_scaling.yaml", "--dry-run"],
                               capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, env=env)
    assert (completed.returncode, completed.stderr, completed.stdout) == (2, f"lbtrain: error: {TENSORFLOW_MISSING}\n", "")
