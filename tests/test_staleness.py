"""Simulated staleness (``training.staleness``): asynchronous SGD with a constant delay tau,
``w_{t+1} = w_t - eta * g(w_{max(t - tau, 0)}; batch_{max(t - tau, 0)})`` (Lian et al. 2015,
Dutta et al. 2018), exactly, in one process (lbtrain.train_step.StaleGradients)."""

import numpy as np
import pytest
import tensorflow as tf

from lbtrain.config import ConfigError, run_config_from_dict
from lbtrain.models import build_model
from lbtrain.train_step import GradientStepModel, StaleGradients
from lbtrain.trainer import train
from lbtrain.worlds.simulated import SimulatedWorld


class Record(tf.keras.callbacks.Callback):
    """The weight and the logged staleness after every update of a one-weight model."""

    def __init__(self):
        super().__init__()
        self.weights, self.staleness = [], []

    def on_train_batch_end(self, batch, logs=None):
        self.weights.append(float(self.model.trainable_variables[0].numpy().ravel()[0]))
        self.staleness.append(float(logs["staleness"]))


def one_weight_sgd(staleness, targets, learning_rate=0.1):
    """Loss (w - c_t)^2 at update t (prediction w * 1, mean squared error, one sample a
    batch), so g(w; batch t) = 2 (w - c_t); w_0 = 1; plain SGD."""
    inputs = tf.keras.Input((1,))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")(inputs))
    prepared = SimulatedWorld(1).prepare_model(model, 1, staleness=staleness)
    prepared.compile(optimizer=tf.keras.optimizers.SGD(learning_rate), loss="mse")
    record = Record()
    prepared.fit(np.ones((len(targets), 1), np.float32), np.array(targets, np.float32)[:, None], batch_size=1,
                 shuffle=False, verbose=0, callbacks=[record])
    return record


def test_staleness_1_matches_the_hand_computed_updates():
    record = one_weight_sgd(1, targets=[0.0, 1.0, 0.5])
    # t=0: g(w_0; c_0) = 2 (1 - 0) = 2, the only gradient there is:    w_1 = 1 - 0.1 * 2 = 0.8
    # t=1: computes g(w_1; c_1) = 2 (0.8 - 1) = -0.4, applies g_0 = 2:  w_2 = 0.8 - 0.2 = 0.6
    # t=2: computes g(w_2; c_2) = 2 (0.6 - 0.5) = 0.2, applies g_1:     w_3 = 0.6 + 0.04 = 0.64
    np.testing.assert_allclose(record.weights, [0.8, 0.6, 0.64], atol=1e-6)
    assert record.staleness == [0.0, 1.0, 1.0]


def test_staleness_2_applies_the_gradient_of_w0_for_the_first_three_updates():
    record = one_weight_sgd(2, targets=[0.0, 0.0, 0.0, 0.0])
    # g_0 = g(w_0) = 2 is applied at t = 0, 1, 2 (w_1 = 0.8, w_2 = 0.6, w_3 = 0.4);
    # t=3 applies g_1 = g(w_1) = 1.6:                                   w_4 = 0.4 - 0.16 = 0.24
    np.testing.assert_allclose(record.weights, [0.8, 0.6, 0.4, 0.24], atol=1e-6)
    assert record.staleness == [0.0, 1.0, 2.0, 2.0]
    # Synchronous SGD for comparison: 1 -> 0.8 -> 0.64 -> 0.512 -> 0.4096.


def test_a_stale_mlp_follows_the_delayed_recursion_with_momentum():
    """Seven momentum-SGD updates of an mlp with tau = 3 against a plain loop that keeps every
    gradient and applies ``grads[max(t - 3, 0)]`` at update t (float32, atol 1e-6)."""
    tau, steps, batch = 3, 7, 6
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((steps * batch, 5)).astype(np.float32), rng.integers(0, 3, steps * batch)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    stale = SimulatedWorld(1).prepare_model(build_model("mlp", (5,), 3, widths=[8], seed=0), batch, staleness=tau)
    stale.compile(optimizer=tf.keras.optimizers.SGD(0.2, momentum=0.9), loss=loss)
    stale.fit(x, y, batch_size=batch, shuffle=False, verbose=0)

    reference = build_model("mlp", (5,), 3, widths=[8], seed=0)
    optimizer = tf.keras.optimizers.SGD(0.2, momentum=0.9)
    computed = []
    for step in range(steps):
        with tf.GradientTape() as tape:
            value = loss(y[step * batch:(step + 1) * batch], reference(x[step * batch:(step + 1) * batch], training=True))
        computed.append(tape.gradient(value, reference.trainable_variables))
        optimizer.apply_gradients(zip(computed[max(step - tau, 0)], reference.trainable_variables))
    for got, want in zip(stale.trainable_variables, reference.trainable_variables):
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)


def test_staleness_0_trains_the_model_as_it_is():
    model = build_model("mlp", (5,), 3, widths=[8], seed=0)
    assert SimulatedWorld(4).prepare_model(model, 2, staleness=0) is model


def run(**training):
    return run_config_from_dict({
        "data": {"dataset": "mnist1d", "train_subset": 192, "options": {"num_samples": 400}},
        "model": {"name": "mlp", "options": {"widths": [32]}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.05, "base_batch": 8, "rule": "linear", "warmup_epochs": 1, "decay": {"type": "cosine"}},
        "training": {"world_size": 4, "per_worker_batch": 8, "epochs": 3, "seed": 1, **training},
    })


class StopAfterFirstEpoch(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise KeyboardInterrupt("killed after epoch 1")


def test_the_ring_buffer_is_checkpointed_so_a_resumed_run_ends_like_an_uninterrupted_one(tmp_path):
    """Staleness 4 in a simulated world of 4: a run killed after epoch 1 (6 updates) and resumed
    applies the same stale gradients as one that never stopped; the history and the run config
    record the staleness."""
    config = run(staleness=4)
    uninterrupted = train(config, SimulatedWorld(4))
    with pytest.raises(KeyboardInterrupt):
        train(config, SimulatedWorld(4), run_dir=tmp_path, callbacks=[StopAfterFirstEpoch()])
    resumed = train(config, SimulatedWorld(4), run_dir=tmp_path, resume=True)
    assert resumed.total_steps == uninterrupted.total_steps == 18
    assert int(resumed.model.stale_gradients.updates.numpy()) == 18
    for a, b in zip(uninterrupted.model.trainable_variables, resumed.model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    assert [row["staleness"] for row in resumed.history] == [4.0, 4.0, 4.0]
    assert resumed.config["training"]["staleness"] == 4

    synchronous = train(run(), SimulatedWorld(4))
    assert not isinstance(synchronous.model, GradientStepModel)
    assert max(np.abs(a.numpy() - b.numpy()).max()
               for a, b in zip(synchronous.model.trainable_variables, uninterrupted.model.trainable_variables)) > 1e-3


@pytest.mark.parametrize("value, message", [
    (-1, "training.staleness: Input should be greater than or equal to 0 (got -1)"),
    (True, "training.staleness: Input should be a valid integer (got True)"),
    (1.5, "training.staleness: Input should be a valid integer (got 1.5)"),
])
def test_bad_staleness_is_a_one_line_config_error(value, message):
    with pytest.raises(ConfigError) as error:
        run(staleness=value)
    assert str(error.value) == message


def test_the_buffer_needs_a_positive_integer_staleness():
    variables = [tf.Variable(tf.zeros(2))]
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="staleness must be an integer >= 1"):
            StaleGradients(variables, bad)
