"""The contract every optimizer a run can name keeps, driven by ``lbtrain.optimizers.OPTIMIZERS``
(a newly registered optimizer is tested by being registered): full serialization (exclude
lists and schedule included), finite updates, Horovod's rebuild, XLA, and a real
`horovodrun -np 2` run. Saving and loading in a fresh process, in every format, with and
without Horovod's wrapper: tests/test_saving.py."""

import copy
import logging

import numpy as np
import pytest
import tensorflow as tf

from helpers import JOB_FOLDER, shared_horovod_job
from lbtrain._keras import KERAS_3, tensorflow_variables
from lbtrain.models import build_model
from lbtrain.optimizers import LAMB, LARS, OPTIMIZERS, build_optimizer
from lbtrain.schedules import Warmup
from reference import gradient_steps, run_keras, variable_set

# Non-default settings per registered optimizer, so a setting lost in serialization shows; a
# registered optimizer without an entry is tested with its defaults.
SETTINGS = {
    "momentum": {"momentum": 0.8, "nesterov": True},
    "adam": {"beta_1": 0.85, "epsilon": 1e-6},
    "lars": {"momentum": 0.8, "weight_decay": 5e-4, "eta": 0.01, "nesterov": True,
             "exclude_from_weight_decay": [r"bias", r"logits"], "exclude_from_layer_adaptation": [r"bias"]},
    "lamb": {"beta_1": 0.85, "weight_decay": 0.02, "exclude_from_weight_decay": [r"bias"],
             "exclude_from_layer_adaptation": [r"logits"]},
}
# Each case: (registered name, settings). Every registered optimizer, plus variants worth a
# contract check of their own.
CASES = {name: (name, SETTINGS.get(name, {})) for name in OPTIMIZERS}
CASES["lars_non_classic"] = ("lars", {"classic_momentum": False, "epsilon": 1e-6, "exclude_from_weight_decay": [r"gamma"]})
LEARNING_RATES = {"float": lambda: 0.05, "schedule": lambda: Warmup(0.05, 3, start_lr=0.01)}
# Attributes holding the exclude lists (on lbtrain's layer-wise optimizers; Keras's have at most the first).
EXCLUDE_ATTRIBUTES = ("exclude_from_weight_decay_names", "exclude_from_layer_adaptation_names")


def make(case, learning_rate):
    name, settings = CASES[case]
    return build_optimizer(name, learning_rate, **copy.deepcopy(settings))


def updates_equal(first, second, steps=4):
    weights = variable_set()
    grads = gradient_steps(weights, steps)
    a, b = run_keras(first, weights, grads), run_keras(second, weights, grads)
    for name in weights:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_every_registered_optimizer_has_a_contract_case():
    assert set(OPTIMIZERS) <= set(CASES) and {name for name, _ in CASES.values()} <= set(OPTIMIZERS)


@pytest.mark.parametrize("learning_rate", LEARNING_RATES)
@pytest.mark.parametrize("case", CASES)
def test_config_round_trip_keeps_everything(case, learning_rate):
    optimizer = make(case, LEARNING_RATES[learning_rate]())
    config = optimizer.get_config()
    for key, value in CASES[case][1].items():
        assert config[key] == value, key
    rebuilt = type(optimizer).from_config(copy.deepcopy(config))  # Keras's from_config edits its argument
    assert rebuilt.get_config() == config
    for attribute in EXCLUDE_ATTRIBUTES:
        assert getattr(rebuilt, attribute, None) == getattr(optimizer, attribute, None), attribute
    if "exclude_from_layer_adaptation" in config:  # a layer-wise optimizer keeps both lists
        assert all(hasattr(rebuilt, attribute) for attribute in EXCLUDE_ATTRIBUTES)
    via_keras = tf.keras.optimizers.deserialize(tf.keras.optimizers.serialize(optimizer))
    assert type(via_keras) is type(optimizer) and via_keras.get_config() == config
    updates_equal(make(case, LEARNING_RATES[learning_rate]()), rebuilt)


@pytest.mark.parametrize("learning_rate", LEARNING_RATES)
@pytest.mark.parametrize("case", CASES)
def test_a_step_changes_every_weight_finitely(case, learning_rate):
    weights = variable_set()
    updated = run_keras(make(case, LEARNING_RATES[learning_rate]()), weights, gradient_steps(weights, 1, zero_gradient=None))
    for name, before in weights.items():
        assert np.all(np.isfinite(updated[name])), name
        assert not np.array_equal(updated[name], before), f"{name} did not move"


def test_default_layer_adaptation_mask_follows_weight_decay_mask_through_config():
    optimizer = LARS(exclude_from_weight_decay=[r"logits"])
    assert optimizer.exclude_from_layer_adaptation_names == [r"logits"]
    assert LARS.from_config(optimizer.get_config()).exclude_from_layer_adaptation_names == [r"logits"]


@pytest.mark.parametrize("cls", [LARS, LAMB])
def test_an_embeddings_sparse_gradient_updates_as_its_dense_gradient(cls):
    """TensorFlow hands an embedding's gradient as ``tf.IndexedSlices`` (``keras.ops`` keeps them
    sparse on Keras 3): the update is the one of the same gradient dense."""
    embeddings = {sparse: tf.keras.layers.Embedding(6, 3, name="embedding") for sparse in (True, False)}
    tf.keras.utils.set_random_seed(0)
    for layer in embeddings.values():
        layer.build((None,))
    embeddings[False].set_weights(embeddings[True].get_weights())
    start = embeddings[True].get_weights()[0]
    for sparse, layer in embeddings.items():
        optimizer = cls(0.1, weight_decay=0.01)
        for step in range(2):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(layer(tf.constant([0, 2, 2, 5 - step]))))
            variables = tensorflow_variables(layer.trainable_variables)
            (gradient,) = tape.gradient(loss, variables)
            assert isinstance(gradient, tf.IndexedSlices)
            optimizer.apply_gradients([(gradient if sparse else tf.convert_to_tensor(gradient), layer.trainable_variables[0])])
    sparse_weights, dense_weights = (embeddings[sparse].get_weights()[0] for sparse in (True, False))
    np.testing.assert_array_equal(sparse_weights, dense_weights)
    assert np.all(sparse_weights != start)  # rows without a gradient decay too


# ---------------------------------------------------------------- a config from the other Keras line

# What the other Keras line writes into every optimizer's config besides this line's keys, as
# it writes them (tf.keras 2.15: is_legacy_optimizer, jit_compile; Keras 3: loss scaling and
# gradient accumulation, off). Real configs from the other line, through a saved model:
# tests/test_saving.py.
OTHER_LINE_KEYS = ({"is_legacy_optimizer": False, "jit_compile": True} if KERAS_3
                   else {"loss_scale_factor": None, "gradient_accumulation_steps": None})
# A setting of the other line the loaded optimizer cannot apply.
OTHER_LINE_SETTING = {"decay": 1e-4} if KERAS_3 else {"gradient_accumulation_steps": 4}


def dropped_records(caplog):
    return [record for record in caplog.records if record.name == "lbtrain.optimizers._layerwise"]


@pytest.mark.parametrize("cls", [LARS, LAMB])
def test_from_config_of_the_other_keras_line_drops_its_keys_and_logs_them_at_info(cls, caplog):
    optimizer = cls(Warmup(0.05, 3, start_lr=0.01), weight_decay=0.02, exclude_from_weight_decay=[r"logits"])
    config = {**optimizer.get_config(), **OTHER_LINE_KEYS}
    with caplog.at_level(logging.INFO, logger="lbtrain"):
        loaded = cls.from_config(copy.deepcopy(config))
    assert loaded.get_config() == optimizer.get_config()
    updates_equal(cls(Warmup(0.05, 3, start_lr=0.01), weight_decay=0.02, exclude_from_weight_decay=[r"logits"]), loaded)
    [record] = dropped_records(caplog)
    assert record.levelno == logging.INFO
    other, this = ("tf.keras 2", "Keras 3") if KERAS_3 else ("Keras 3", "tf.keras 2")
    assert record.getMessage().startswith(
        f"{cls.__name__}.from_config: dropped what {this}'s optimizers do not take from a {other} config: ")
    for key, value in OTHER_LINE_KEYS.items():
        assert f"{key}={value!r} (" in record.getMessage()


def test_a_dropped_setting_that_changes_the_updates_is_logged_as_a_warning(caplog):
    config = {**LARS(0.1).get_config(), **OTHER_LINE_KEYS, **OTHER_LINE_SETTING}
    with caplog.at_level(logging.INFO, logger="lbtrain"):
        loaded = LARS.from_config(config)
    assert loaded.get_config() == LARS(0.1).get_config()
    [record] = dropped_records(caplog)
    [(key, value)] = OTHER_LINE_SETTING.items()
    assert record.levelno == logging.WARNING
    assert record.getMessage().endswith(f". The loaded optimizer does not apply {key}={value!r}")


def test_a_keras_schedule_tf_keras_2_wrote_without_a_name_runs_after_from_config():
    """tf.keras 2 writes ``"name": None`` into its schedules' configs; Keras 3's CosineDecay took it
    and failed when called (``Argument `name` must be a string``), also inside lbtrain's Warmup."""
    cosine = {"module": "keras.optimizers.schedules", "class_name": "CosineDecay", "registered_name": None,
              "config": {"initial_learning_rate": 0.5, "decay_steps": 20, "alpha": 0.0, "name": None,
                         "warmup_target": None, "warmup_steps": 0}}
    warmup = {"module": "lbtrain.schedules", "class_name": "Warmup", "registered_name": "lbtrain>Warmup",
              "config": {"target_lr": 0.5, "warmup_steps": 4, "after": cosine, "start_lr": 0.1, "offset_after": False,
                         "name": None, "warmup_type": "gradual"}}
    expected = Warmup(0.5, 4, start_lr=0.1, after=tf.keras.optimizers.schedules.CosineDecay(0.5, 20))
    for learning_rate in (cosine, warmup):
        config = {**LARS(0.1).get_config(), **OTHER_LINE_KEYS, "learning_rate": copy.deepcopy(learning_rate)}
        schedule = LARS.from_config(config)._learning_rate
        want = expected if learning_rate is warmup else expected.after
        np.testing.assert_allclose([float(schedule(step)) for step in range(8)], [float(want(step)) for step in range(8)])


def test_from_config_still_refuses_a_key_neither_keras_line_writes():
    config = {**LARS(0.1).get_config(), "eeta": 0.01}
    with pytest.raises(ValueError, match=r"LARS: unknown argument 'eeta' \(did you mean 'eta'\?"):
        LARS.from_config(config)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.horovod
def test_horovod_distributed_optimizer_rebuild_keeps_exclude_lists_and_schedule(case):
    """Model Garden's LARS loses its exclude lists exactly here: hvd rebuilds from get_config()."""
    import horovod.tensorflow.keras as hvd

    hvd.init()
    optimizer = make(case, Warmup(0.05, 3, start_lr=0.01))
    wrapped = hvd.DistributedOptimizer(optimizer)
    assert isinstance(wrapped, type(optimizer)) and isinstance(wrapped._learning_rate, Warmup)
    assert wrapped.get_config() == optimizer.get_config()
    for attribute in EXCLUDE_ATTRIBUTES:
        assert getattr(wrapped, attribute, None) == getattr(optimizer, attribute, None), attribute
    updates_equal(make(case, Warmup(0.05, 3, start_lr=0.01)), wrapped)


def fit_steps(optimizer, *, jit_compile, steps=3):
    model = build_model("cnn", (8, 8, 1), 3, filters=[4], dense=[8], batch_norm=True, seed=0)
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8 * steps, 8, 8, 1)).astype(np.float32), rng.integers(0, 3, 8 * steps)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    return model.get_weights()


@pytest.mark.parametrize("case", CASES)
def test_xla_compiled_train_step_matches_the_plain_one(case):
    plain = fit_steps(make(case, Warmup(0.05, 2)), jit_compile=False)
    compiled = fit_steps(make(case, Warmup(0.05, 2)), jit_compile=True)
    for a, b in zip(plain, compiled):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# Run in the session's shared horovodrun job (conftest: horovod_jobs).
LARS_TWO_RANKS = shared_horovod_job("test_contract:lars", "lars_two_ranks.py", f"{JOB_FOLDER}/weights.npz")
BACKWARD_PASSES = shared_horovod_job("test_contract:backward_passes", "backward_passes_two_ranks.py", f"{JOB_FOLDER}/weights.npz")


@pytest.mark.slow
@pytest.mark.horovod
def test_lars_under_horovodrun_matches_one_process_with_the_global_batch(horovod_jobs):
    weights = np.load(horovod_jobs(LARS_TWO_RANKS) / "weights.npz")
    names = sorted({key.split(":")[1] for key in weights.files})
    for layer in names:
        rank0, rank1, single = (weights[f"{who}:{layer}"] for who in ("rank0", "rank1", "single"))
        np.testing.assert_array_equal(rank0, rank1)
        np.testing.assert_allclose(rank0, single, atol=1e-5)
    initial = weights["initial:0"]
    assert not np.allclose(initial, weights["rank0:0"])


@pytest.mark.slow
@pytest.mark.horovod
def test_under_horovods_backward_passes_per_step_lbtrains_optimizers_clock_updates(horovod_jobs):
    """``hvd.DistributedOptimizer(..., backward_passes_per_step=2, average_aggregated_gradients=True)``
    under ``horovodrun -np 2`` reaches the weights of one process at the 4 times larger batch:
    LARS and LAMB with a Warmup by themselves (their schedule and LAMB's bias correction count
    updates, not Horovod's passes), Keras's SGD with ``PerUpdate(schedule, 2)``; Keras's SGD
    with the bare schedule runs its warmup twice too fast and does not."""
    weights = np.load(horovod_jobs(BACKWARD_PASSES) / "weights.npz")
    layers = sorted({key.split(":")[1] for key in weights.files if key.startswith("initial:")})
    for case in ("lars", "lamb", "sgd_per_update", "sgd_bare"):
        # Horovod counts 8 passes; one process 4 updates.
        assert weights[f"{case}:iterations"].tolist() == [8, 4], case
        for layer in layers:
            rank0, rank1, single = (weights[f"{case}:{who}:{layer}"] for who in ("rank0", "rank1", "single"))
            np.testing.assert_array_equal(rank0, rank1)
            assert not np.allclose(rank0, weights[f"initial:{layer}"]), f"{case}: layer {layer} did not move"
            if case != "sgd_bare":
                np.testing.assert_allclose(rank0, single, atol=1e-5, err_msg=f"{case}: layer {layer}")
        bare = max(np.max(np.abs(weights[f"{case}:rank0:{layer}"] - weights[f"{case}:single:{layer}"])) for layer in layers)
        assert bool(bare > 1e-3) is (case == "sgd_bare"), (case, bare)
