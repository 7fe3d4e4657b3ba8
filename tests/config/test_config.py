import pytest
import yaml

from lbtrain.config import (
    ConfigError,
    apply_overrides,
    known_field_path,
    load_experiment,
    load_run_config,
    run_config_from_dict,
)


def write(path, data):
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_run_config_defaults_and_round_trip():
    config = run_config_from_dict({})
    assert (config.data.dataset, config.model.name, config.optimizer.name, config.lr.rule) == ("fashion_mnist", "mlp", "momentum", "linear")
    assert run_config_from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "data, message",
    [
        ({"training": {"world_sz": 2}}, "training.world_sz: unknown key"),
        ({"training": {"world_size": 2.5}}, "training.world_size: Input should be a valid integer (got 2.5)"),
        ({"training": {"world_size": 0}}, "training.world_size: Input should be greater than 0 (got 0)"),
        ({"training": {"epochs": "3"}}, "training.epochs: Input should be a valid integer (got '3')"),
        ({"training": {"per_worker_batch": -8}}, "training.per_worker_batch: Input should be greater than 0 (got -8)"),
        ({"lr": {"base_lr": 0}}, "lr.base_lr: Input should be greater than 0 (got 0)"),
        ({"lr": {"rule": "cubic"}}, "lr.rule: rule must be one of 'linear', 'sqrt', 'none' or a float exponent, got 'cubic'"),
        ({"lr": {"decay": {"type": "cosin"}}}, "lr.decay.type: unknown decay 'cosin' (allowed: none, exponential, step, cosine, polynomial)"),
        ({"optimizer": {"name": "adamw"}}, "optimizer.name: unknown optimizer 'adamw' (allowed: sgd, momentum, adam, lars, lamb)"),
        ({"optimizer": {"name": "lars", "params": {"eta": -1}}}, "optimizer.params: LARS: eta must be > 0, got -1"),
        ({"data": {"dataset": "cifar"}}, "data.dataset: unknown dataset 'cifar' (allowed: fashion_mnist, mnist, mnist1d, synthetic, a registered name, a .npz path, package.module:function or tfds:<name>)"),
        ({"model": {"name": "vgg"}}, "model.name: unknown model 'vgg' (allowed: mlp, cnn, resnet, vit, a reference package.module:function, or keras.applications.<Name>)"),
        ({"training": {"world_size": 3, "micro_batches": 2}}, "training.micro_batches (2) must divide training.world_size (3)"),
    ],
)
def test_bad_run_configs_name_the_field(data, message):
    with pytest.raises(ConfigError) as error:
        run_config_from_dict(data)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_extends_merges_in_order_relative_to_the_file(tmp_path):
    (tmp_path / "configs").mkdir()
    write(tmp_path / "configs" / "a.yaml", {"model": {"name": "cnn", "options": {"filters": [8]}}, "training": {"epochs": 5}})
    write(tmp_path / "configs" / "b.yaml", {"model": {"options": {"dense": [16]}}, "training": {"epochs": 7}})
    path = write(tmp_path / "exp.yaml", {"name": "e", "extends": ["configs/a.yaml", "configs/b.yaml"], "training": {"seed": 3}})
    experiment = load_experiment(path)
    assert experiment.model == {"name": "cnn", "options": {"filters": [8], "dense": [16]}}
    assert experiment.training == {"epochs": 7, "seed": 3}


def test_overrides_parse_yaml_values_and_reject_unknown_paths(tmp_path):
    path = write(tmp_path / "exp.yaml", {"name": "e", "lr": {"base_lr": 0.1}})
    experiment = load_experiment(path, ["lr.base_lr=0.4", "grid.world_sizes=[1, 2]", "model.options.widths=[8]", "mode=horovod"])
    assert experiment.lr == {"base_lr": 0.4} and experiment.grid == {"world_sizes": [1, 2]}
    assert experiment.model == {"options": {"widths": [8]}} and experiment.mode == "horovod"
    with pytest.raises(ConfigError, match=r"--set lr.base_rate: no such field"):
        load_experiment(path, ["lr.base_rate=0.4"])
    with pytest.raises(ConfigError, match=r"--set 'lr.base_lr': expected PATH=VALUE"):
        apply_overrides({}, ["lr.base_lr"])


def test_known_field_paths():
    assert known_field_path("lr.rule") and known_field_path("optimizer.params.eta") and known_field_path("horovod.hosts")
    assert not known_field_path("lr.rul") and not known_field_path("trainer.epochs")


@pytest.mark.parametrize(
    "content, message",
    [
        ("name: [unclosed", r"invalid YAML"),
        ("- a\n- b\n", r"expected a mapping at the top level, got list"),
        ({"name": "e", "epochs": 3}, r"^epochs: unknown key \(did you mean 'training.epochs'\?\)$"),
        ({"name": "e", "mode": "mpi"}, r"^mode: Input should be 'simulated', 'horovod', 'mirrored', 'multiworker' or 'parameter_server' \(got 'mpi'\)$"),
        ({"name": "e", "extends": "missing.yaml"}, r"missing.yaml: file not found"),
        ({"name": "bad name!"}, r"^name: String should match pattern"),
    ],
)
def test_bad_experiment_files(tmp_path, content, message):
    path = write(tmp_path / "exp.yaml", content)
    with pytest.raises(ConfigError, match=message):
        load_experiment(path)


def test_missing_experiment_and_run_files(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.yaml: file not found"):
        load_experiment(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"run.yaml: file not found"):
        load_run_config(tmp_path / "run.yaml")
