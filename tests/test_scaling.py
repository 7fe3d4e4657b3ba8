import pytest

from lbtrain.scaling import RULE_EXPONENTS, global_batch_size, scale_learning_rate, scaling_exponent, scaling_factor


def test_goyal_numbers_linear_and_sqrt():
    assert scale_learning_rate(0.1, 256, 8192, "linear") == pytest.approx(3.2, rel=1e-12)
    assert scale_learning_rate(0.1, 256, 8192, "sqrt") == pytest.approx(0.565685424949238, rel=1e-12)
    assert scale_learning_rate(0.1, 256, 8192, "none") == 0.1


def test_float_exponent_and_shrinking_batch():
    assert scale_learning_rate(0.2, 128, 1024, 0.75) == pytest.approx(0.2 * 8**0.75, rel=1e-12)
    assert scale_learning_rate(0.4, 256, 64, "linear") == pytest.approx(0.1, rel=1e-12)
    assert scaling_factor(100, 400, "sqrt") == pytest.approx(2.0, rel=1e-12)


def test_named_rules_are_their_exponents():
    assert {rule: scaling_exponent(rule) for rule in RULE_EXPONENTS} == {"linear": 1.0, "sqrt": 0.5, "none": 0.0}
    assert scaling_exponent(2) == 2.0


def test_global_batch():
    assert global_batch_size(64, 128) == 8192


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: scale_learning_rate(0.1, 256, 512, "cubic"), r"rule must be one of 'linear', 'sqrt', 'none' or a float exponent, got 'cubic'"),
        (lambda: scale_learning_rate(0.1, 256, 512, float("nan")), r"rule must be one of .* got nan"),
        (lambda: scale_learning_rate(0.1, 256, 512, True), r"rule must be one of .* got True"),
        (lambda: scale_learning_rate(0.0, 256, 512, "linear"), r"base_lr must be a positive number, got 0.0"),
        (lambda: scale_learning_rate(-1, 256, 512, "linear"), r"base_lr must be a positive number, got -1"),
        (lambda: scale_learning_rate(0.1, 0, 512, "linear"), r"base_batch must be a positive integer, got 0"),
        (lambda: scale_learning_rate(0.1, 256, 51.2, "linear"), r"global_batch must be a positive integer, got 51.2"),
        (lambda: global_batch_size(0, 128), r"world_size must be a positive integer, got 0"),
        (lambda: global_batch_size(2, -3), r"per_worker_batch must be a positive integer, got -3"),
    ],
)
def test_bad_inputs_name_the_argument_and_what_is_allowed(call, message):
    with pytest.raises(ValueError, match=message):
        call()
