"""Saved models reload everywhere: lbtrain's Keras classes are registered under ``lbtrain>Name``
and under their bare names (``lbtrain._registration``), so a model saved as SavedModel,
``.keras`` or H5, with or without ``hvd.DistributedOptimizer``, loads in a fresh process after
``import lbtrain`` and resumes training to the same weights; and ``import lbtrain`` has no
side effects on Keras's own names or on matplotlib."""

import copy
import json
import os
import subprocess
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from helpers import REPO_ROOT, run_python
from lbtrain._keras import KERAS_3
from lbtrain._registration import KERAS_CLASSES
from lbtrain.layers import GhostBatchNormalization
from lbtrain.optimizers import OPTIMIZERS, build_optimizer
from lbtrain.schedules import ConstantLearningRate, Warmup

# The modules whose classes Keras finds by bare name when it deserializes a saved model.
KERAS_NAMESPACES = {
    "activations": tf.keras.activations, "constraints": tf.keras.constraints, "initializers": tf.keras.initializers,
    "layers": tf.keras.layers, "losses": tf.keras.losses, "metrics": tf.keras.metrics,
    "optimizers": tf.keras.optimizers, "regularizers": tf.keras.regularizers,
    "schedules": tf.keras.optimizers.schedules,
}
# Keras 2's deserializers take the legacy format ({"class_name", "config"}, what H5 and
# SavedModel hold) on request; Keras 3's take it as it comes.
LEGACY_FORMAT = {} if KERAS_3 else {"use_legacy_format": True}


def test_every_keras_class_is_registered_under_both_names_and_shadows_no_keras_name():
    assert set(KERAS_CLASSES) == {"ConstantLearningRate", "ElasticLearningRate", "GhostBatchNormalization", "LAMB", "LARS", "PerUpdate",
                                  "Warmup"}
    for bare, cls in KERAS_CLASSES.items():
        assert tf.keras.utils.get_registered_object(bare) is cls
        assert tf.keras.utils.get_registered_object(tf.keras.utils.get_registered_name(cls)) is cls
        clashes = [module for module, namespace in KERAS_NAMESPACES.items() if hasattr(namespace, bare)]
        assert clashes == [], f"{bare} would shadow Keras's {clashes} when a model is loaded"
    # Files saved before the constant schedule was renamed name it lbtrain>Constant.
    assert tf.keras.utils.get_registered_name(ConstantLearningRate) == "lbtrain>Constant"


def test_keras_constant_initializer_still_loads_by_its_bare_name():
    """H5 and SavedModel rebuild initializers by bare class name, looking at registered names
    first: a schedule registered as ``Constant`` would replace Keras's initializer there."""
    initializer = tf.keras.initializers.deserialize({"class_name": "Constant", "config": {"value": 0.5}}, **LEGACY_FORMAT)
    assert type(initializer) is tf.keras.initializers.Constant
    np.testing.assert_array_equal(initializer((2,)), [0.5, 0.5])


@pytest.mark.parametrize("schedule", [ConstantLearningRate(0.25), Warmup(0.4, 3, start_lr=0.1, after=ConstantLearningRate(0.2))])
def test_schedule_loads_through_kerass_legacy_path_by_class_name(schedule):
    """What an H5 file holds: the optimizer's config with the schedule's class name, rebuilt
    by Keras's legacy deserializer, which ignores ``registered_name``."""
    config = tf.keras.optimizers.schedules.serialize(schedule)
    legacy = {"class_name": config["class_name"], "config": config["config"]}
    rebuilt = tf.keras.optimizers.schedules.deserialize(legacy, **LEGACY_FORMAT)
    assert type(rebuilt) is type(schedule)
    np.testing.assert_array_equal([float(rebuilt(s)) for s in range(5)], [float(schedule(s)) for s in range(5)])


def test_import_registers_bare_names_once_tensorflow_loads_and_loads_no_matplotlib():
    code = textwrap.dedent(
        """
        import sys, lbtrain
        import tensorflow as tf
        from lbtrain.optimizers import LARS
        lbtrain.Warmup, lbtrain.build_schedule, lbtrain.LearningRateWarmup
        get = tf.keras.utils.get_registered_object
        print([get(name).__name__ for name in ("LARS", "LAMB", "Warmup", "ConstantLearningRate", "GhostBatchNormalization")])
        print(sorted(name for name in sys.modules if name.split(".")[0] == "matplotlib"))
        """
    )
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr[-2000:]
    # Keras 3 imports matplotlib.pyplot itself when it is installed (keras.src.visualization);
    # lbtrain adds none. Keras 2 imports none.
    keras_alone = run_python("import sys, tensorflow as tf; tf.keras.optimizers\n"
                             "print(sorted(name for name in sys.modules if name.split('.')[0] == 'matplotlib'))")
    assert keras_alone.returncode == 0, keras_alone.stderr[-2000:]
    assert (keras_alone.stdout.strip() == "[]") is not KERAS_3
    assert completed.stdout.splitlines() == [
        "['LARS', 'LAMB', 'Warmup', 'ConstantLearningRate', 'GhostBatchNormalization']", keras_alone.stdout.strip()]


# ---------------------------------------------------------------- save here, load in a fresh process

FORMATS = {"keras": "model.keras", "h5": "model.h5", "savedmodel": "savedmodel"}
if KERAS_3:  # Keras 3 writes a SavedModel only for inference (model.export), without the optimizer
    del FORMATS["savedmodel"]
SCHEDULES = {
    "warmup": lambda: Warmup(0.05, 3, start_lr=0.01, after=tf.keras.optimizers.schedules.CosineDecay(0.05, 10)),
    "constant": lambda: ConstantLearningRate(0.05),
}
# Each case: (registered optimizer, its settings, schedule). Every registered optimizer with
# lbtrain's warmup (a Keras decay inside), plus Keras's own SGD with lbtrain's constant
# schedule; exclude lists that are not the defaults, so a list lost on load shows.
CASES = {name: (name, {}, "warmup") for name in OPTIMIZERS}
CASES["lars"] = ("lars", {"exclude_from_weight_decay": [r"logits"], "exclude_from_layer_adaptation": [r"bias"],
                          "trust_ratio_denominator": "decayed_gradient"}, "warmup")
CASES["lamb"] = ("lamb", {"exclude_from_weight_decay": [r"bias"], "exclude_from_layer_adaptation": [r"logits"]}, "warmup")
CASES["momentum_constant"] = ("momentum", {}, "constant")


def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((24, 6)).astype(np.float32), rng.integers(0, 3, 24)


def make_model():
    """A model with lbtrain's ghost BN layer and Keras's Constant initializer (whose bare name
    lbtrain must not take)."""
    tf.keras.utils.set_random_seed(0)
    return tf.keras.Sequential([
        tf.keras.Input((6,)),
        tf.keras.layers.Dense(8, bias_initializer=tf.keras.initializers.Constant(0.1)),
        GhostBatchNormalization(virtual_batch_size=4),
        tf.keras.layers.ReLU(),
        tf.keras.layers.Dense(3, name="logits"),
    ])


def trained_and_saved(case, wrap, path):
    """Trains two steps, saves to ``path``, trains one more step; returns what a loaded copy
    must reproduce."""
    name, settings, schedule = CASES[case]
    optimizer = wrap(build_optimizer(name, SCHEDULES[schedule](), **settings))
    model = make_model()
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data()
    model.fit(x[:16], y[:16], batch_size=8, shuffle=False, verbose=0)
    model.save(path)
    config = json.loads(json.dumps(optimizer.get_config(), default=float))
    if not resumes(path):
        return {"class": type(optimizer).__name__, "config": config, "weights": model.get_weights(), "iterations": 2}
    model.fit(x[16:], y[16:], batch_size=8, shuffle=False, verbose=0)
    return {"class": type(optimizer).__name__, "config": config, "weights": model.get_weights(), "iterations": 3}


def resumes(path: str) -> bool:
    """Whether a model loaded from ``path`` trains on. Not an H5 file on Keras 3: Keras 3.15
    builds the loaded optimizer on other variables than the model's, and the first step
    fails (``Unknown variable``) with Keras's own SGD too; the model and the optimizer's
    config still load."""
    return not (KERAS_3 and path.endswith(".h5"))


LOAD = textwrap.dedent(
    """
    import json, sys
    import numpy as np, tensorflow as tf
    import lbtrain
    from lbtrain._keras import KERAS_3
    if sys.argv[2] == "horovod":
        import horovod.tensorflow  # a SavedModel saved under Horovod holds its allreduce ops (horovod#4028)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((24, 6)).astype(np.float32), rng.integers(0, 3, 24)
    results = {}
    for key, path in json.loads(sys.argv[1]).items():
        model = tf.keras.models.load_model(path)
        if not path.endswith((".keras", ".h5")):
            model.load_weights(path)  # Keras 2.15 restores a SavedModel's optimizer state only here (tensorflow#44670)
        config = json.loads(json.dumps(model.optimizer.get_config(), default=float))
        if not (KERAS_3 and path.endswith(".h5")):  # see resumes() in tests/test_saving.py
            model.fit(x[16:], y[16:], batch_size=8, shuffle=False, verbose=0)
        results[key] = {"class": type(model.optimizer).__name__, "config": config,
                        "iterations": int(model.optimizer.iterations.numpy()),
                        "ghost_bn": [type(layer).__name__ for layer in model.layers].count("GhostBatchNormalization"),
                        "weights": [w.tolist() for w in model.get_weights()]}
    print(json.dumps(results))
    """
)


def distributed(optimizer):
    import horovod.tensorflow.keras as hvd

    hvd.init()
    return hvd.DistributedOptimizer(optimizer)


# Each wrapper: the function wrapping the optimizer, and the cases saved with it. Under Horovod
# only lbtrain's optimizers: Horovod's subclass of Keras's own SGD or Adam is saved in .keras
# under a module (horovod._keras) and bare name Keras cannot resolve, and lbtrain registers
# bare names for its own classes only.
WRAPPERS = {"plain": (lambda optimizer: optimizer, list(CASES)), "horovod": (distributed, ["lars", "lamb"])}


@pytest.mark.slow
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:You are saving your model as an HDF5 file")
@pytest.mark.parametrize("wrapper", [pytest.param(name, marks=pytest.mark.horovod) if name == "horovod" else name
                                     for name in WRAPPERS])
def test_saved_models_load_and_resume_in_a_fresh_process_in_every_format(tmp_path, wrapper):
    """Before bare names were registered: H5 failed with ``Unknown decay: 'Warmup'``, and every
    format failed with ``Unknown optimizer: 'LARS'`` under hvd.DistributedOptimizer."""
    wrap, cases = WRAPPERS[wrapper]
    paths, expected = {}, {}
    for case in cases:
        (tmp_path / case).mkdir()
        for fmt, filename in FORMATS.items():
            key = f"{case}/{fmt}"
            paths[key] = str(tmp_path / case / filename)
            expected[key] = trained_and_saved(case, wrap, paths[key])
    completed = run_python(LOAD, json.dumps(paths), wrapper, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    loaded = json.loads(completed.stdout.strip().splitlines()[-1])
    for key, want in expected.items():
        got = loaded[key]
        assert got["class"] == want["class"] == type(build_optimizer(CASES[key.split("/")[0]][0], 0.1)).__name__, key
        assert got["config"] == want["config"], key
        assert got["iterations"] == want["iterations"] and got["ghost_bn"] == 1, key
        for a, b in zip(got["weights"], want["weights"]):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=key)


# ---------------------------------------------------------------- saved on one Keras line, loaded on the other

# The two stacks `make test` sets up (Makefile): TensorFlow 2.15 / tf.keras 2.15 and
# TensorFlow 2.21 / Keras 3.
STACKS = {"tf.keras 2": os.path.join(REPO_ROOT, ".venv"), "Keras 3": os.path.join(REPO_ROOT, ".venv-keras3")}


def stack_python(stack: str) -> str:
    """The interpreter of ``stack``'s venv; skips, saying how to make it, when it is absent."""
    python = os.path.join(STACKS[stack], "bin", "python")
    if not (os.path.isfile(python) and os.path.isfile(os.path.join(STACKS[stack], ".lbtrain-installed"))):
        pytest.skip(f"needs both stacks, and the {stack} one ({STACKS[stack]}) is not set up: "
                    "make setup setup-keras3 builds .venv and .venv-keras3")
    return python


def run_on(stack: str, code: str, *args: str, timeout=600) -> dict:
    """Runs ``code`` with ``stack``'s interpreter in a fresh process; returns the JSON it prints last."""
    completed = subprocess.run([stack_python(stack), "-c", code, *args], capture_output=True, text=True, cwd=REPO_ROOT,
                               timeout=timeout)
    assert completed.returncode == 0, f"on {stack}:\n{completed.stderr[-3000:]}"
    return json.loads(completed.stdout.strip().splitlines()[-1])


# Shared by both sides: the data, the model, and the rates an optimizer applies at steps 0-7.
CROSS_COMMON = textwrap.dedent(
    """
    import json, logging, sys
    import numpy as np, tensorflow as tf
    import lbtrain
    from lbtrain._keras import KERAS_3
    from lbtrain.optimizers import LAMB, LARS
    from lbtrain.schedules import Warmup

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((32, 6)).astype(np.float32), rng.integers(0, 3, 32)

    def make_model():
        tf.keras.utils.set_random_seed(0)
        return tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(8, activation="relu"),
                                    tf.keras.layers.Dense(3, activation="softmax", name="logits")])

    def rates(optimizer):
        rate = optimizer._learning_rate
        if isinstance(rate, tf.keras.optimizers.schedules.LearningRateSchedule):
            return [float(rate(step)) for step in range(8)]
        return [float(tf.convert_to_tensor(rate))] * 8

    def plain(config):
        return json.loads(json.dumps(config, default=float))

    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            if record.name.startswith("lbtrain.optimizers"):
                records.append([record.levelname, record.getMessage()])
    logging.getLogger("lbtrain").addHandler(Keep())
    logging.getLogger("lbtrain").setLevel(logging.INFO)

    def logged():
        kept = list(records)
        records.clear()
        return kept
    """
)

# On tf.keras 2: LARS (every hyper-parameter off its default, a warmup into a Keras cosine
# decay) and LAMB compiled into a model, two steps, saved to .keras; two more steps, whose
# weights the other line must reproduce from the file.
SAVE_ON_KERAS_2 = CROSS_COMMON + textwrap.dedent(
    """
    assert not KERAS_3
    OPTIMIZERS = {
        "lars": lambda: LARS(Warmup(0.5, 4, start_lr=0.1, after=tf.keras.optimizers.schedules.CosineDecay(0.5, 20)),
                             momentum=0.8, weight_decay=5e-4, eta=0.01, epsilon=1e-6, nesterov=True,
                             trust_ratio_denominator="decayed_gradient", exclude_from_weight_decay=["bias", "logits"],
                             exclude_from_layer_adaptation=["bias"]),
        "lamb": lambda: LAMB(2e-3, beta_1=0.85, beta_2=0.99, epsilon=1e-5, weight_decay=0.02,
                             exclude_from_weight_decay=["bias"], exclude_from_layer_adaptation=["logits"]),
    }
    saved = {}
    for key, make in OPTIMIZERS.items():
        model, optimizer = make_model(), make()
        model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
        model.fit(x[:16], y[:16], batch_size=8, shuffle=False, verbose=0)
        model.save(f"{sys.argv[1]}/{key}.keras")
        saved[key] = {"serialized": plain(tf.keras.optimizers.serialize(optimizer)), "rates": rates(optimizer),
                      "outputs": model.predict(x[:4], verbose=0).tolist()}
        model.fit(x[16:], y[16:], batch_size=8, shuffle=False, verbose=0)
        saved[key]["resumed"] = [weight.tolist() for weight in model.get_weights()]
    print(json.dumps(saved))
    """
)

# On Keras 3: each optimizer from the serialized config and from the .keras file, then two
# more steps of training.
LOAD_ON_KERAS_3 = CROSS_COMMON + textwrap.dedent(
    """
    assert KERAS_3
    saved = json.loads(open(sys.argv[2]).read())
    loaded = {}
    for key, item in saved.items():
        optimizer = tf.keras.optimizers.deserialize(item["serialized"])
        loaded[key] = {"deserialized": {"class": type(optimizer).__name__, "config": plain(optimizer.get_config()),
                                        "rates": rates(optimizer), "log": logged()}}
        model = tf.keras.models.load_model(f"{sys.argv[1]}/{key}.keras")
        loaded[key]["load_model"] = {"class": type(model.optimizer).__name__, "config": plain(model.optimizer.get_config()),
                                     "rates": rates(model.optimizer), "log": logged(),
                                     "iterations": int(model.optimizer.iterations.numpy())}
        # Keras 3 takes tf.keras 2's compile config with steps_per_execution=None, on which its
        # predict and fit fail (Keras's own, with any optimizer): compile again, with the loaded
        # optimizer.
        model.compile(optimizer=model.optimizer, loss="sparse_categorical_crossentropy")
        loaded[key]["load_model"]["outputs"] = model.predict(x[:4], verbose=0).tolist()
        model.fit(x[16:], y[16:], batch_size=8, shuffle=False, verbose=0)
        loaded[key]["resumed"] = [weight.tolist() for weight in model.get_weights()]
        loaded[key]["iterations_after"] = int(model.optimizer.iterations.numpy())
    print(json.dumps(loaded))
    """
)


@pytest.mark.slow
def test_lars_and_lamb_saved_on_tf_keras_2_load_and_resume_on_keras_3(tmp_path):
    """Issue #34, defect 9: Keras 3 refused tf.keras 2's ``is_legacy_optimizer`` and ``jit_compile``
    in the optimizer's config (``LARS: unknown arguments 'is_legacy_optimizer', 'jit_compile'``),
    from ``tf.keras.optimizers.deserialize`` and from ``load_model`` of a .keras file."""
    saved = run_on("tf.keras 2", SAVE_ON_KERAS_2, str(tmp_path))
    (tmp_path / "saved.json").write_text(json.dumps(saved))
    loaded = run_on("Keras 3", LOAD_ON_KERAS_3, str(tmp_path), str(tmp_path / "saved.json"))
    for key, item in saved.items():
        written = copy.deepcopy(item["serialized"]["config"])
        assert (written.pop("is_legacy_optimizer"), "jit_compile" in written) == (False, True), key
        del written["jit_compile"]
        if key == "lars":  # Keras 3's CosineDecay cannot run with tf.keras 2's name None: its default name
            assert written["learning_rate"]["config"]["after"]["config"]["name"] is None
            written["learning_rate"]["config"]["after"]["config"]["name"] = "CosineDecay"
        for way in ("deserialized", "load_model"):
            got = loaded[key][way]
            assert got["class"] == item["serialized"]["class_name"] == key.upper(), (key, way)
            # Every hyper-parameter as written, the schedule included; Keras 3's own keys at their defaults.
            assert {name: got["config"][name] for name in written} == written, (key, way)
            assert {name: value for name, value in got["config"].items() if name not in written} == {
                "loss_scale_factor": None, "gradient_accumulation_steps": None}, (key, way)
            np.testing.assert_allclose(got["rates"], item["rates"], rtol=1e-7, err_msg=f"{key} {way}")
            assert [level for level, _ in got["log"]] == ["INFO"], (key, way, got["log"])
            assert got["log"][0][1].startswith(
                f"{key.upper()}.from_config: dropped what Keras 3's optimizers do not take from a tf.keras 2 config: "
                "is_legacy_optimizer=False ("), (key, way)
        if key == "lars":
            config = loaded[key]["load_model"]["config"]
            assert (config["momentum"], config["weight_decay"], config["eta"], config["epsilon"], config["nesterov"]) == (
                0.8, 5e-4, 0.01, 1e-6, True)
            assert config["learning_rate"]["class_name"] == "Warmup"
            assert config["learning_rate"]["config"]["after"]["class_name"] == "CosineDecay"
            assert (config["exclude_from_weight_decay"], config["exclude_from_layer_adaptation"]) == (
                ["bias", "logits"], ["bias"])
        reloaded = loaded[key]["load_model"]
        assert reloaded["iterations"] == 2 and loaded[key]["iterations_after"] == 4, key
        np.testing.assert_allclose(reloaded["outputs"], item["outputs"], rtol=1e-6, atol=1e-7, err_msg=key)
        # The optimizer's state (step, momentum or moments) came across: two more steps on Keras
        # 3 end where two more on tf.keras 2 did.
        for got, want in zip(loaded[key]["resumed"], item["resumed"]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=key)


# The reverse, configs only (tf.keras 2.15 cannot read a Keras 3 .keras file's model config,
# whatever the optimizer): LARS as Keras 3 writes it, and LAMB with a gradient accumulation
# tf.keras 2 cannot apply.
SAVE_ON_KERAS_3 = CROSS_COMMON + textwrap.dedent(
    """
    assert KERAS_3
    optimizers = {"lars": LARS(Warmup(0.5, 4, start_lr=0.1), momentum=0.8, weight_decay=5e-4, eta=0.01),
                  "lamb": LAMB(2e-3, beta_1=0.85, weight_decay=0.02, gradient_accumulation_steps=4)}
    print(json.dumps({key: {"serialized": plain(tf.keras.optimizers.serialize(optimizer)), "rates": rates(optimizer)}
                      for key, optimizer in optimizers.items()}))
    """
)
LOAD_ON_KERAS_2 = CROSS_COMMON + textwrap.dedent(
    """
    assert not KERAS_3
    loaded = {}
    for key, item in json.loads(open(sys.argv[1]).read()).items():
        optimizer = tf.keras.optimizers.deserialize(item["serialized"])
        loaded[key] = {"class": type(optimizer).__name__, "config": plain(optimizer.get_config()),
                       "rates": rates(optimizer), "log": logged()}
    print(json.dumps(loaded))
    """
)


@pytest.mark.slow
def test_lars_and_lamb_configs_written_on_keras_3_load_on_tf_keras_2(tmp_path):
    saved = run_on("Keras 3", SAVE_ON_KERAS_3)
    (tmp_path / "saved.json").write_text(json.dumps(saved))
    loaded = run_on("tf.keras 2", LOAD_ON_KERAS_2, str(tmp_path / "saved.json"))
    for key, item in saved.items():
        written, got = dict(item["serialized"]["config"]), loaded[key]
        accumulation = written.pop("gradient_accumulation_steps"), written.pop("loss_scale_factor")
        assert got["class"] == key.upper()
        assert {name: got["config"][name] for name in written} == written, key
        np.testing.assert_allclose(got["rates"], item["rates"], rtol=1e-7, err_msg=key)
        [(level, message)] = got["log"]
        if key == "lamb":  # tf.keras 2 applies every batch: a different training, a warning
            assert accumulation == (4, None) and level == "WARNING", message
            assert message.endswith(". The loaded optimizer does not apply gradient_accumulation_steps=4"), message
        else:
            assert accumulation == (None, None) and level == "INFO", message
