"""NumPy references of LARS and LAMB, and a harness that runs an optimizer on named
variables (Keras-style names: dense kernels, conv kernels, biases, batch-norm gamma/beta)."""

import re

import numpy as np
import tensorflow as tf

DEFAULT_EXCLUDE = (r"bias", r"batch_norm", r"gamma", r"beta")


def variable_set(seed=0):
    """Named float64 weights; one all-zero kernel for the zero-norm case."""
    rng = np.random.default_rng(seed)
    return {
        "dense_0/kernel:0": rng.standard_normal((6, 4)),
        "dense_0/bias:0": rng.standard_normal(4) * 0.1,
        "conv_0/kernel:0": rng.standard_normal((3, 3, 2, 5)) * 0.2,
        "batch_norm_0/gamma:0": 1.0 + rng.standard_normal(5) * 0.1,
        "batch_norm_0/beta:0": rng.standard_normal(5) * 0.1,
        "zero/kernel:0": np.zeros((3, 3)),
    }


def gradient_steps(weights, steps, seed=1, zero_gradient="dense_0/bias:0"):
    """Random gradients for every variable and step; ``zero_gradient`` gets zeros at step 1."""
    rng = np.random.default_rng(seed)
    grads = [{name: rng.standard_normal(w.shape) * 0.5 for name, w in weights.items()} for _ in range(steps)]
    if zero_gradient:
        grads[1][zero_gradient] = np.zeros_like(weights[zero_gradient])
    return grads


def run_keras(optimizer, weights, grads):
    """Applies ``grads`` step by step with a Keras optimizer; returns the final weights."""
    variables = {name: tf.Variable(value, name=name[:-2], dtype=tf.float64) for name, value in weights.items()}
    assert [v.name for v in variables.values()] == list(weights)
    for step_grads in grads:
        optimizer.apply_gradients([(tf.constant(step_grads[name]), variables[name]) for name in weights])
    return {name: v.numpy() for name, v in variables.items()}


def _matches(name, patterns):
    return any(re.search(p, name) for p in patterns)


def _trust(weight_norm, denominator, eta=1.0):
    return eta * weight_norm / denominator if weight_norm > 0 and denominator > 0 else 1.0


def lars_reference(weights, grads, *, lr, momentum=0.9, weight_decay=1e-4, eta=1e-3, epsilon=0.0, nesterov=False,
                   classic_momentum=True, exclude_from_weight_decay=DEFAULT_EXCLUDE, exclude_from_layer_adaptation=None):
    """You et al. 2017 Algorithm 1, the paper's trust ratio eta*||w|| / (||g|| + wd*||w|| + eps)
    (see lbtrain.optimizers.LARS). ``lr`` maps step -> rate."""
    adapt_excluded = exclude_from_weight_decay if exclude_from_layer_adaptation is None else exclude_from_layer_adaptation
    w = {k: v.copy() for k, v in weights.items()}
    velocity = {k: np.zeros_like(v) for k, v in weights.items()}
    for step, step_grads in enumerate(grads):
        rate = lr(step)
        for name in w:
            g = step_grads[name]
            wd = 0.0 if _matches(name, exclude_from_weight_decay) else weight_decay
            decayed = g + wd * w[name]
            adapts = not _matches(name, adapt_excluded)
            w_norm = np.linalg.norm(w[name])
            if classic_momentum:
                trust = _trust(w_norm, np.linalg.norm(g) + wd * w_norm + epsilon, eta) if adapts else 1.0
                velocity[name] = momentum * velocity[name] + rate * trust * decayed
                update = momentum * velocity[name] + rate * trust * decayed if nesterov else velocity[name]
                w[name] = w[name] - update
            else:
                velocity[name] = momentum * velocity[name] + decayed
                update = momentum * velocity[name] + decayed if nesterov else velocity[name]
                trust = _trust(w_norm, np.linalg.norm(update) + epsilon, eta) if adapts else 1.0
                w[name] = w[name] - rate * trust * update
    return w


def model_garden_lars_reference(weights, grads, *, learning_rate, momentum=0.9, weight_decay_rate=0.0, eeta=0.001,
                                nesterov=False, classic_momentum=True, exclude_from_weight_decay=None,
                                exclude_from_layer_adaptation=None):
    """TF Model Garden's LARS (official/modeling/optimization/lars.py) in NumPy, in its own
    argument names: the weight decay goes into the gradient first, and the classic trust ratio
    divides by the norm of that decayed gradient, eeta*||w|| / ||g + wd*w|| (no epsilon; 1
    where either norm is 0). An empty or missing layer-adaptation list means the weight-decay
    list; weights named by neither list decay and adapt."""
    adapt_excluded = exclude_from_layer_adaptation or exclude_from_weight_decay or []
    decay_excluded = exclude_from_weight_decay or []

    def ratio(w_norm, other_norm):
        return eeta * w_norm / other_norm if w_norm > 0 and other_norm > 0 else 1.0

    w = {k: v.copy() for k, v in weights.items()}
    slots = {k: np.zeros_like(v) for k, v in weights.items()}
    for step, step_grads in enumerate(grads):
        rate = learning_rate(step)
        for name in w:
            grad = step_grads[name]
            if weight_decay_rate and not _matches(name, decay_excluded):
                grad = grad + weight_decay_rate * w[name]
            adapts = not _matches(name, adapt_excluded)
            if classic_momentum:
                scaled_lr = rate * (ratio(np.linalg.norm(w[name]), np.linalg.norm(grad)) if adapts else 1.0)
                slots[name] = momentum * slots[name] + scaled_lr * grad
                w[name] = w[name] - (momentum * slots[name] + scaled_lr * grad if nesterov else slots[name])
            else:
                slots[name] = momentum * slots[name] + grad
                update = momentum * slots[name] + grad if nesterov else slots[name]
                scaled_lr = rate * (ratio(np.linalg.norm(w[name]), np.linalg.norm(update)) if adapts else 1.0)
                w[name] = w[name] - scaled_lr * update
    return w


def optax_lars_reference(weights, grads, *, learning_rate, weight_decay=0.0, weight_decay_mask=None,
                         trust_coefficient=0.001, eps=0.0, trust_ratio_mask=None, momentum=0.9, nesterov=False):
    """``optax.lars`` in NumPy: its chain add_decayed_weights -> scale_by_trust_ratio ->
    scale_by_learning_rate -> trace, in its own argument names (masks: name -> bool, True for
    every variable when None). The trust ratio is trust_coefficient*||w|| / (||u|| + eps) with u
    the decayed gradient, 1 where ||w|| or ||u|| is 0."""
    w = {k: v.copy() for k, v in weights.items()}
    trace = {k: np.zeros_like(v) for k, v in weights.items()}
    for step, step_grads in enumerate(grads):
        for name in w:
            u = step_grads[name]
            if weight_decay_mask is None or weight_decay_mask(name):
                u = u + weight_decay * w[name]
            if trust_ratio_mask is None or trust_ratio_mask(name):
                w_norm, u_norm = np.linalg.norm(w[name]), np.linalg.norm(u)
                u = u * (1.0 if w_norm == 0 or u_norm == 0 else trust_coefficient * w_norm / (u_norm + eps))
            u = -learning_rate(step) * u
            trace[name] = momentum * trace[name] + u
            w[name] = w[name] + (momentum * trace[name] + u if nesterov else trace[name])
    return w


def lamb_reference(weights, grads, *, lr, beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay=0.01,
                   exclude_from_weight_decay=DEFAULT_EXCLUDE, exclude_from_layer_adaptation=None):
    """You et al. 2019 Algorithm 2 (see lbtrain.optimizers.LAMB)."""
    adapt_excluded = exclude_from_weight_decay if exclude_from_layer_adaptation is None else exclude_from_layer_adaptation
    w = {k: v.copy() for k, v in weights.items()}
    m = {k: np.zeros_like(v) for k, v in weights.items()}
    v = {k: np.zeros_like(v) for k, v in weights.items()}
    for step, step_grads in enumerate(grads):
        t = step + 1
        for name in w:
            g = step_grads[name]
            m[name] = beta_1 * m[name] + (1 - beta_1) * g
            v[name] = beta_2 * v[name] + (1 - beta_2) * g**2
            update = (m[name] / (1 - beta_1**t)) / (np.sqrt(v[name] / (1 - beta_2**t)) + epsilon)
            if not _matches(name, exclude_from_weight_decay):
                update = update + weight_decay * w[name]
            trust = _trust(np.linalg.norm(w[name]), np.linalg.norm(update)) if not _matches(name, adapt_excluded) else 1.0
            w[name] = w[name] - lr(step) * trust * update
    return w
