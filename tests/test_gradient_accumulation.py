"""Keras 3's ``gradient_accumulation_steps``: Keras clocks a schedule in batches; lbtrain's LARS
and LAMB clock it in updates, and ``PerUpdate`` does so for Keras's own optimizers."""

import numpy as np
import pytest
import tensorflow as tf

from lbtrain._keras import KERAS_3
from lbtrain.optimizers import LAMB, LARS
from lbtrain.schedules import PerUpdate, Warmup

keras_3_only = pytest.mark.skipif(not KERAS_3, reason="gradient_accumulation_steps is Keras 3's (tf.keras 2 has none)")

STEPS = 4  # batches per update


def schedule():
    return Warmup(target_lr=0.8, warmup_steps=4, start_lr=0.0)  # 0.2, 0.4, 0.6, 0.8, then 0.8


def trained(optimizer, batches=8):
    """``optimizer`` after ``batches`` batches of 4 samples on a tiny dense model (one epoch)."""
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer=optimizer, loss="mse")
    x = np.random.default_rng(0).normal(size=(4 * batches, 3)).astype(np.float32)
    model.fit(x, np.zeros((4 * batches, 2), np.float32), batch_size=4, epochs=1, verbose=0, shuffle=False)
    return model.optimizer


@keras_3_only
@pytest.mark.parametrize("make", [lambda s: LARS(s, momentum=0.9, gradient_accumulation_steps=STEPS),
                                  lambda s: LAMB(s, gradient_accumulation_steps=STEPS)], ids=["LARS", "LAMB"])
def test_lbtrain_optimizers_clock_their_schedule_in_updates(make):
    optimizer = trained(make(schedule()))
    assert int(optimizer.iterations.numpy()) == 2  # 8 batches, one update per 4
    assert float(optimizer.learning_rate) == pytest.approx(0.6)  # schedule(2): the third update's rate


@keras_3_only
def test_keras_sgd_clocks_batches_and_per_update_fixes_it():
    keras_clock = trained(tf.keras.optimizers.SGD(schedule(), gradient_accumulation_steps=STEPS))
    assert int(keras_clock.iterations.numpy()) == 2 and float(keras_clock.learning_rate) == pytest.approx(0.8)  # schedule(8)
    per_update = trained(tf.keras.optimizers.SGD(PerUpdate(schedule(), STEPS), gradient_accumulation_steps=STEPS))
    assert float(per_update.learning_rate) == pytest.approx(0.6)


def test_per_update_values_and_its_config_round_trip():
    wrapped = PerUpdate(schedule(), 3)
    assert [round(float(wrapped(step)), 6) for step in range(7)] == [0.2, 0.2, 0.2, 0.4, 0.4, 0.4, 0.6]
    again = tf.keras.optimizers.schedules.deserialize(tf.keras.optimizers.schedules.serialize(wrapped))
    assert isinstance(again, PerUpdate) and again.gradient_accumulation_steps == 3 and float(again(6)) == pytest.approx(0.6)
