"""LARS and LAMB on Keras 3's JAX backend (issue #34, "Beyond the anchors"): their formulas are
written once in ``keras.ops`` (``lbtrain._keras.ops``), so ``KERAS_BACKEND=jax`` with ``from
lbtrain.optimizers import LARS, LAMB`` trains a Keras 3 model. Each check runs in a fresh
process of this interpreter with ``KERAS_BACKEND=jax`` and is held to the NumPy references
(tests/optimizers/reference.py) at the tolerances of the TensorFlow tests: float64 variables
(JAX's x64 mode) against every variant of test_lars.py and test_lamb.py, a model trained by
``model.fit`` (float32, the jitted stateless train step) as in test_exclusion_names.py, and a
model that saves to ``.keras`` and reloads in another fresh process with the optimizer's
hyperparameters and state. The TensorFlow-only parts (trainer, worlds, callbacks, layers)
refuse the backend with one line.

Runs on the Keras 3 stack with JAX installed (``make setup-keras3`` installs it); skips
elsewhere, saying why.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_lamb import VARIANTS as LAMB_VARIANTS
from test_lars import VARIANTS as LARS_VARIANTS

from helpers import REPO_ROOT, stderr_lines
from lbtrain._keras import KERAS_3
from reference import gradient_steps, lamb_reference, lars_reference, variable_set

pytestmark = [
    pytest.mark.skipif(not KERAS_3, reason="Keras 3's JAX backend: this interpreter is the tf.keras 2 stack (TensorFlow 2.15); "
                                           "run with .venv-keras3/bin/python"),
    pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                       reason="JAX is not installed next to this Keras 3: make setup-keras3 installs it "
                              "(.venv-keras3/bin/pip install jax jaxlib)"),
]

def run_jax(code: str, *args: str, timeout=300) -> dict:
    """Runs ``code`` in a fresh process with ``KERAS_BACKEND=jax``; returns the JSON it prints last."""
    completed = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                               cwd=REPO_ROOT, timeout=timeout, env={**os.environ, "KERAS_BACKEND": "jax"})
    assert completed.returncode == 0, "\n".join(stderr_lines(completed.stderr)[-40:])
    return json.loads(completed.stdout.strip().splitlines()[-1])


# ------------------------------------------------ every variant against the NumPy references

# Variables named as the references name them (``dense_0/kernel``: a name scope and the
# weight), float64 under JAX's x64 mode, updated by ``apply_gradients``.
APPLY_GRADIENTS = """
    import json, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import keras
    import numpy as np
    from lbtrain.optimizers import LAMB, LARS
    assert keras.backend.backend() == "jax", keras.backend.backend()

    job = json.load(open(sys.argv[1]))
    results = {}
    for case, (optimizer_name, learning_rate, options) in job["cases"].items():
        variables = {}
        for name, value in job["weights"].items():
            scope, weight = name[:-2].split("/")
            with keras.name_scope(scope):
                variables[name] = keras.Variable(np.asarray(value), dtype="float64", name=weight)
        optimizer = {"LARS": LARS, "LAMB": LAMB}[optimizer_name](learning_rate, **options)
        for step in job["grads"]:
            optimizer.apply_gradients([(np.asarray(step[name]), variables[name]) for name in variables])
        results[case] = {name: np.asarray(variable.value).tolist() for name, variable in variables.items()}
        results[case]["dtype"] = str(variables[name].dtype)
    print(json.dumps(results))
    """
STEPS = 6
CASES = {**{f"LARS {variant}": ("LARS", 0.5, options) for variant, options in LARS_VARIANTS.items()},
         **{f"LAMB {variant}": ("LAMB", 0.01, options) for variant, options in LAMB_VARIANTS.items()}}


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    weights = variable_set()
    grads = gradient_steps(weights, STEPS)
    job = {"cases": CASES, "weights": {name: value.tolist() for name, value in weights.items()},
           "grads": [{name: value.tolist() for name, value in step.items()} for step in grads]}
    path = tmp_path_factory.mktemp("jax") / "job.json"
    path.write_text(json.dumps(job))
    return weights, grads, run_jax(APPLY_GRADIENTS, str(path))


@pytest.mark.parametrize("case", CASES)
def test_every_variant_matches_the_numpy_reference_on_jax(case, applied):
    weights, grads, results = applied
    optimizer_name, learning_rate, options = CASES[case]
    if optimizer_name == "LARS":
        expected = lars_reference(weights, grads, lr=lambda step: learning_rate, **options)
    else:  # Keras keeps a float learning rate in a float32 variable
        expected = lamb_reference(weights, grads, lr=lambda step: float(np.float32(learning_rate)), **options)
    got = results[case]
    assert got.pop("dtype") == "float64"
    for name in weights:
        # test_lars.py's and test_lamb.py's tolerances.
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-10, atol=1e-12, err_msg=name)
        if name != "zero/kernel:0" or case.endswith("no_exclusions"):
            assert not np.allclose(got[name], weights[name]), f"{name} did not move"


# ------------------------------------------------------------------- model.fit on JAX

# A Sequential named like a default regex (test_exclusion_names.py): the kernels adapt, the
# rest is excluded. Each step: the gradient fit applies next (jax.grad of the same loss through
# the model's stateless call, in training mode), then one fit step of the full batch.
FIT = """
    import json
    import jax
    import keras
    import numpy as np
    from lbtrain.optimizers import LAMB, LARS

    def layers():
        return [keras.layers.Dense(5, activation="relu", name="hidden"), keras.layers.BatchNormalization(name="batch_normalization"),
                keras.layers.Dense(3, name="logits")]

    OPTIMIZERS = {"LARS": lambda: LARS(), "LARS non-classic nesterov": lambda: LARS(classic_momentum=False, nesterov=True),
                  "LAMB": lambda: LAMB()}
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 6)).astype(np.float32), rng.integers(0, 3, 16)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    results = {}
    for case, make in OPTIMIZERS.items():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6,)), *layers()], name="beta_vae")
        model.compile(optimizer=make(), loss=loss)

        def loss_of(trainable, non_trainable):
            outputs, _ = model.stateless_call(trainable, non_trainable, x, training=True)
            return loss(y, outputs)

        start = [np.asarray(v.value, np.float64).tolist() for v in model.trainable_variables]
        steps = []
        for _ in range(3):
            grads = jax.grad(loss_of)([v.value for v in model.trainable_variables],
                                      [v.value for v in model.non_trainable_variables])
            steps.append([np.asarray(g, np.float64).tolist() for g in grads])
            model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
        results[case] = {"start": start, "steps": steps, "iterations": int(model.optimizer.iterations.numpy()),
                         "final": [np.asarray(v.value, np.float64).tolist() for v in model.trainable_variables],
                         "paths": [v.path for v in model.trainable_variables]}
    print(json.dumps(results))
    """
NAMES = ["hidden/kernel", "hidden/bias", "batch_normalization/gamma", "batch_normalization/beta", "logits/kernel",
         "logits/bias"]
KERNELS = ("hidden/kernel", "logits/kernel")
FIT_REFERENCES = {
    "LARS": lambda start, steps, **masks: lars_reference(start, steps, lr=lambda step: 0.1, **masks),
    "LARS non-classic nesterov": lambda start, steps, **masks: lars_reference(
        start, steps, lr=lambda step: 0.1, classic_momentum=False, nesterov=True, **masks),
    "LAMB": lambda start, steps, **masks: lamb_reference(start, steps, lr=lambda step: 1e-3, **masks),
}


@pytest.fixture(scope="module")
def fitted():
    return run_jax(FIT)


@pytest.mark.parametrize("case", FIT_REFERENCES)
def test_model_fit_on_jax_matches_the_numpy_reference(case, fitted):
    result = fitted[case]
    assert result["paths"] == [f"beta_vae/{name}" for name in NAMES]
    assert result["iterations"] == 3
    start = {name: np.asarray(value) for name, value in zip(NAMES, result["start"])}
    steps = [{name: np.asarray(value) for name, value in zip(NAMES, step)} for step in result["steps"]]
    expected = FIT_REFERENCES[case](start, steps)
    # Everything excluded: what LARS would be if the model's name were matched (momentum SGD, or Adam).
    unadapted = FIT_REFERENCES[case](start, steps, exclude_from_weight_decay=[r"."])
    for name, got in zip(NAMES, result["final"]):
        # test_exclusion_names.py's tolerances (float32, through model.fit).
        np.testing.assert_allclose(got, expected[name], rtol=2e-5, atol=2e-6, err_msg=name)
        assert np.allclose(got, unadapted[name], rtol=2e-5, atol=2e-6) is (name not in KERNELS), name
        assert not np.allclose(got, start[name]), f"{name} did not move"


# ------------------------------------------------------------- save and reload on JAX

# Trains a model per optimizer for three steps, saves it, then trains one step more: what the
# reloaded model must also do from the file.
SAVE = """
    import json, sys
    import keras
    import numpy as np
    from lbtrain.optimizers import LAMB, LARS

    OPTIMIZERS = {
        "LARS": lambda: LARS(keras.optimizers.schedules.CosineDecay(0.5, 20), momentum=0.8, eta=0.01,
                             nesterov=True, weight_decay=5e-4, exclude_from_weight_decay=[r"bias", r"logits"],
                             exclude_from_layer_adaptation=[r"bias"]),
        "LAMB": lambda: LAMB(0.02, beta_1=0.85, weight_decay=0.02, exclude_from_layer_adaptation=[r"logits"]),
    }
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((24, 6)).astype(np.float32), rng.integers(0, 3, 24)
    results = {}
    for case, make in OPTIMIZERS.items():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu", name="hidden"),
                                  keras.layers.Dense(3, name="logits")])
        model.compile(optimizer=make(), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
        path = f"{sys.argv[1]}/{case}.keras"
        model.save(path)
        saved = {"path": path, "class": type(model.optimizer).__name__,
                 "config": json.loads(json.dumps(model.optimizer.get_config(), default=float)),
                 "iterations": int(model.optimizer.iterations.numpy()),
                 "state": [np.asarray(v.value, np.float64).tolist() for v in model.optimizer.variables],
                 "outputs": np.asarray(model.predict(x[:4], verbose=0), np.float64).tolist()}
        model.fit(x[:8], y[:8], batch_size=8, shuffle=False, verbose=0)
        saved["resumed"] = [np.asarray(v.value, np.float64).tolist() for v in model.trainable_variables]
        results[case] = saved
    print(json.dumps(results))
    """
RELOAD = """
    import json, sys
    import keras
    import numpy as np
    import lbtrain.optimizers  # registers LARS and LAMB with Keras

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((24, 6)).astype(np.float32), rng.integers(0, 3, 24)
    results = {}
    for case, path in json.loads(sys.argv[1]).items():
        model = keras.models.load_model(path)
        loaded = {"class": type(model.optimizer).__name__, "module": type(model.optimizer).__module__,
                  "config": json.loads(json.dumps(model.optimizer.get_config(), default=float)),
                  "iterations": int(model.optimizer.iterations.numpy()),
                  "state": [np.asarray(v.value, np.float64).tolist() for v in model.optimizer.variables],
                  "outputs": np.asarray(model.predict(x[:4], verbose=0), np.float64).tolist()}
        model.fit(x[:8], y[:8], batch_size=8, shuffle=False, verbose=0)
        loaded["resumed"] = [np.asarray(v.value, np.float64).tolist() for v in model.trainable_variables]
        results[case] = loaded
    print(json.dumps(results))
    """


@pytest.fixture(scope="module")
def saved_and_reloaded(tmp_path_factory):
    saved = run_jax(SAVE, str(tmp_path_factory.mktemp("jax_models")))
    reloaded = run_jax(RELOAD, json.dumps({case: item["path"] for case, item in saved.items()}))
    return saved, reloaded


@pytest.mark.parametrize("case", ["LARS", "LAMB"])
def test_a_model_saves_and_reloads_in_a_fresh_process_with_its_optimizer_intact(case, saved_and_reloaded):
    saved, reloaded = saved_and_reloaded[0][case], saved_and_reloaded[1][case]
    assert (reloaded["class"], reloaded["module"]) == (case, f"lbtrain.optimizers.{case.lower()}")
    assert reloaded["config"] == saved["config"]
    assert reloaded["iterations"] == saved["iterations"] == 3
    # The step, the learning rate and the slots (momentum; LAMB's two moments), in order.
    assert len(reloaded["state"]) == len(saved["state"])
    for index, (got, want) in enumerate(zip(reloaded["state"], saved["state"])):
        np.testing.assert_array_equal(got, want, err_msg=f"optimizer variable {index}")
    assert any(np.any(np.asarray(slot) != 0) for slot in saved["state"][1:]), "the slots hold no state"
    np.testing.assert_allclose(reloaded["outputs"], saved["outputs"], rtol=1e-6, atol=1e-7)
    # One more step from the file is the step the saved model took: the state resumed.
    for got, want in zip(reloaded["resumed"], saved["resumed"]):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_the_settings_saved_are_the_ones_given(saved_and_reloaded):
    lars, lamb = saved_and_reloaded[1]["LARS"]["config"], saved_and_reloaded[1]["LAMB"]["config"]
    assert (lars["momentum"], lars["eta"], lars["nesterov"], lars["weight_decay"]) == (0.8, 0.01, True, 5e-4)
    assert (lars["exclude_from_weight_decay"], lars["exclude_from_layer_adaptation"]) == ([r"bias", r"logits"], [r"bias"])
    assert lars["learning_rate"]["class_name"] == "CosineDecay"
    # Keras keeps a float learning rate in a float32 variable.
    assert (lamb["learning_rate"], lamb["beta_1"], lamb["weight_decay"]) == (float(np.float32(0.02)), 0.85, 0.02)
    assert lamb["exclude_from_layer_adaptation"] == [r"logits"]


# ------------------------------------------------ what stays on the TensorFlow backend

REFUSALS = """
    import json
    import importlib
    results = {}
    for module in ("lbtrain.trainer", "lbtrain.worlds.simulated", "lbtrain.worlds.horovod", "lbtrain.worlds.mirrored",
                   "lbtrain.callbacks", "lbtrain.layers"):
        try:
            importlib.import_module(module)
            results[module] = None
        except ImportError as error:
            results[module] = str(error)
    print(json.dumps(results))
    """


def test_the_tensorflow_only_parts_refuse_jax_with_one_line():
    for module, error in run_jax(REFUSALS).items():
        assert error == ("lbtrain runs Keras 3 on the TensorFlow backend, but KERAS_BACKEND is 'jax': unset it or set it "
                         "to 'tensorflow' (only lbtrain.optimizers and lbtrain.schedules run on every backend)"), module
