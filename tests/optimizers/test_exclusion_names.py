"""What the exclusion regexes of LARS and LAMB see (issue #34, defect 3): the innermost layer and
the weight, ``hidden/kernel``, on tf.keras 2 and Keras 3 alike. Keras 3's ``variable.path``
starts with a Sequential's name: ``keras.Sequential(..., name="beta_vae")`` (or
``"debias_net"``) with ``LARS()`` matched the default regexes ``beta`` (``bias``) on every
variable, so no kernel was adapted or decayed and LARS was momentum SGD; Keras 2 does the same
for a subclassed model's name. Trained through ``model.fit`` and checked against the NumPy
references (tests/optimizers/reference.py) fed the same names."""

import numpy as np
import pytest
import tensorflow as tf

from lbtrain._keras import KERAS_3, variable_name
from lbtrain.optimizers import LAMB, LARS
from reference import lamb_reference, lars_reference

# What every model below holds, as the regexes see it.
NAMES = ["hidden/kernel", "hidden/bias", "batch_normalization/gamma", "batch_normalization/beta",
         "logits/kernel", "logits/bias"]
KERNELS = ("hidden/kernel", "logits/kernel")


def layers():
    # A ReLU between the dense layer and the batch norm, or the norm cancels the bias and its
    # gradient is rounding noise, which Adam (LAMB) scales up to steps of the size of any other.
    return [tf.keras.layers.Dense(5, activation="relu", name="hidden"), tf.keras.layers.BatchNormalization(name="batch_normalization"),
            tf.keras.layers.Dense(3, name="logits")]


class Subclassed(tf.keras.Model):
    def __init__(self, name):
        super().__init__(name=name)
        self.hidden, self.norm, self.logits = layers()

    def call(self, inputs, training=None):
        return self.logits(self.norm(self.hidden(inputs), training=training))


def subclassed(name):
    model = Subclassed(name)
    model(tf.zeros((1, 6)))
    return model


# The user's call (a named Sequential), and the other ways a model's name gets into the
# variables' paths: Keras 2's subclassed model, Keras 3's Sequential inside a Sequential.
MODELS = {
    "sequential beta_vae": lambda: tf.keras.Sequential([tf.keras.Input((6,)), *layers()], name="beta_vae"),
    "sequential debias_net": lambda: tf.keras.Sequential([tf.keras.Input((6,)), *layers()], name="debias_net"),
    "subclassed beta_vae": lambda: subclassed("beta_vae"),
    "nested debias_net": lambda: tf.keras.Sequential(
        [tf.keras.Input((6,)), tf.keras.Sequential(layers(), name="beta_block")], name="debias_net"),
}
# Each optimizer with its defaults, as the user calls it, and its reference with the same defaults.
OPTIMIZERS = {
    "LARS": (LARS, lambda weights, grads: lars_reference(weights, grads, lr=lambda step: 0.1)),
    "LAMB": (LAMB, lambda weights, grads: lamb_reference(weights, grads, lr=lambda step: 1e-3)),
}


@pytest.mark.parametrize("model_kind", MODELS)
def test_the_regexes_see_the_layer_and_the_weight_without_the_models_name(model_kind):
    model = MODELS[model_kind]()
    assert [variable_name(variable) for variable in model.trainable_variables] == NAMES
    if KERAS_3 or model_kind.startswith("subclassed"):
        # The full name does hold the model's: what the default regexes used to match.
        full = getattr(model.trainable_variables[0], "path", None) or model.trainable_variables[0].name
        assert full.startswith(model.name + "/"), full


def test_a_plain_variable_is_seen_without_its_output_index():
    assert variable_name(tf.Variable(np.zeros(2), name="outer/dense_0/kernel")) == "dense_0/kernel"
    assert variable_name(tf.Variable(np.zeros(2), name="kernel")) == "kernel"


def gradients(model, x, y):
    """The gradient ``fit`` applies next (same loss, training mode), as NumPy."""
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, model(x, training=True))
    return [g.numpy().astype(np.float64) for g in tape.gradient(loss, model.trainable_variables)]


@pytest.mark.parametrize("optimizer_name", OPTIMIZERS)
@pytest.mark.parametrize("model_kind", MODELS)
def test_kernels_of_a_model_named_like_a_default_regex_are_adapted_and_the_rest_excluded(model_kind, optimizer_name):
    optimizer_class, reference = OPTIMIZERS[optimizer_name]
    tf.keras.utils.set_random_seed(0)
    model = MODELS[model_kind]()
    model.compile(optimizer=optimizer_class(), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 6)).astype(np.float32), rng.integers(0, 3, 16)
    start = {name: variable.numpy().astype(np.float64) for name, variable in zip(NAMES, model.trainable_variables)}
    steps = []
    for _ in range(2):  # two steps, so the momentum (and LAMB's moments) carry one over
        steps.append(dict(zip(NAMES, gradients(model, x, y))))
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    got = {name: variable.numpy() for name, variable in zip(NAMES, model.trainable_variables)}

    expected = reference(start, steps)
    for name in NAMES:
        np.testing.assert_allclose(got[name], expected[name], rtol=2e-5, atol=2e-6, err_msg=name)
    # The same optimizer with every variable excluded (plain momentum SGD, or Adam for LAMB),
    # what the model's name used to make of it: the kernels end elsewhere, the rest where it does.
    if optimizer_name == "LARS":
        unadapted = lars_reference(start, steps, lr=lambda step: 0.1, exclude_from_weight_decay=[r"."])
    else:
        unadapted = lamb_reference(start, steps, lr=lambda step: 1e-3, exclude_from_weight_decay=[r"."])
    for name in NAMES:
        moved_as_unadapted = np.allclose(got[name], unadapted[name], rtol=2e-5, atol=2e-6)
        assert moved_as_unadapted is (name not in KERNELS), name
    if optimizer_name == "LARS":
        # The default eta 1e-3 scales a kernel's step to about eta * ||w|| / ||g|| of SGD's.
        for name in KERNELS:
            adapted, sgd = np.linalg.norm(got[name] - start[name]), np.linalg.norm(unadapted[name] - start[name])
            assert adapted < 0.05 * sgd, (name, adapted, sgd)
