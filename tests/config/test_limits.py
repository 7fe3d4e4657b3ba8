"""Hostile and careless input is one bounded line before anything is created: alias bombs,
deep nesting, long extends chains, non-finite and oversized numbers, seeds and budgets out of
range, ``~`` in output_dir."""

import os
import time

import pytest

from lbtrain.cli import main
from lbtrain.config import ConfigError, load_experiment, run_config_from_dict
from lbtrain.config.limits import MAX_YAML_DEPTH, QUOTE_LIMIT

BASE = "data: {dataset: synthetic, options: {train_size: 64, test_size: 16}}\ntraining: {epochs: 1}\n"


def billion_laughs(levels: int) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        previous = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{', '.join([previous] * 9)}]")
    return "\n".join(lines)


def run_cli_in_process(capsys, monkeypatch, folder, *args):
    monkeypatch.chdir(folder)
    started = time.perf_counter()
    code = main(list(args))
    lines = capsys.readouterr().err.strip().splitlines()
    return code, lines, time.perf_counter() - started


@pytest.mark.parametrize("where", ["training.epochs", "search"])
def test_an_alias_bomb_is_refused_at_once_in_one_bounded_line(tmp_path, capsys, monkeypatch, where):
    bomb = billion_laughs(9)  # 9**9 = 387 million values once expanded
    field = "training: {epochs: *a8}" if where == "training.epochs" else "search: {lr.base_lr: {type: categorical, choices: *a8}}"
    (tmp_path / "bomb.yaml").write_text(f"{bomb}\n{field}\n")
    code, lines, _ = run_cli_in_process(capsys, monkeypatch, tmp_path, "run", "bomb.yaml", "--dry-run")
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 400
    assert "expands to more than 100000 values" in lines[0] and not (tmp_path / "results").exists()


def test_an_alias_bomb_in_set_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "x.yaml").write_text(BASE)
    value = "[&a [x,x,x,x,x,x,x,x,x], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b], " \
            "&d [*c,*c,*c,*c,*c,*c,*c,*c,*c], &e [*d,*d,*d,*d,*d,*d,*d,*d,*d], &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]]"
    code, lines, _ = run_cli_in_process(capsys, monkeypatch, tmp_path, "run", "x.yaml", "--set", f"training.epochs={value}")
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 400 and "--set training.epochs: expands to more than" in lines[0]


def test_deep_nesting_and_a_self_containing_alias_are_one_line(tmp_path):
    (tmp_path / "deep.yaml").write_text("training: " + "[" * 500 + "]" * 500 + "\n")
    with pytest.raises(ConfigError, match=rf"deep.yaml: nested more than {MAX_YAML_DEPTH} levels deep$"):
        load_experiment(tmp_path / "deep.yaml")
    (tmp_path / "cycle.yaml").write_text("grid: &g {world_sizes: [1], again: *g}\n")
    with pytest.raises(ConfigError, match="an alias refers to a value that contains it"):
        load_experiment(tmp_path / "cycle.yaml")


def test_an_extends_chain_too_deep_is_one_line(tmp_path):
    for index in range(40):
        (tmp_path / f"c{index}.yaml").write_text(f"extends: [c{index + 1}.yaml]\n")
    (tmp_path / "c40.yaml").write_text(BASE)
    with pytest.raises(ConfigError, match=r"c0.yaml: its extends chain is more than 32 files deep$"):
        load_experiment(tmp_path / "c0.yaml")


@pytest.mark.parametrize("override, message", [
    ("lr.rule=1e308", r"lr.rule: rule as a float exponent must be in \[0, 2\], got 1e\+308"),
    ("lr.base_batch=" + "9" * 401, r"lr.base_batch: 9{18}\.\.\.9{19} is too large \(at most 2\*\*53"),
    ("grid.world_sizes=[" + "7" * 401 + "]", r"grid.world_sizes\[0\]: 7{18}\.\.\.7{19} is too large"),
    ("horovod.fusion_threshold_mb=.inf", r"horovod.fusion_threshold_mb: must be a finite number, got inf"),
    ("analysis.sharpness_epsilon=.inf", r"analysis.sharpness_epsilon: must be a finite number, got inf"),
    ("training.seed=-1", r"training.seed: Input should be greater than or equal to 0"),
    ("training.seed=4294967296", r"training.seed: Input should be less than or equal to 4294967295"),
    ("training.seed=18446744073709551616", r"training.seed: 18446744073709551616 is too large"),
    ("training.steps=10000000000", r"training.steps: Input should be less than or equal to 1000000000"),
    ("sweep.heartbeat_seconds=86400", r"sweep.heartbeat_seconds: Input should be less than or equal to 3600"),
])
def test_numbers_out_of_range_are_one_bounded_line_and_nothing_is_created(tmp_path, capsys, monkeypatch, override, message):
    (tmp_path / "x.yaml").write_text(BASE)
    code, lines, _ = run_cli_in_process(capsys, monkeypatch, tmp_path, "run", "x.yaml", "--set", override)
    assert code == 2 and len(lines) == 1, lines
    import re
    assert re.search(message, lines[0]), lines[0]
    assert len(lines[0]) <= 2 * QUOTE_LIMIT + 100 and not (tmp_path / "results").exists()


def test_numbers_are_checked_in_python_too():
    with pytest.raises(ConfigError, match=r"optimizer.params.weight_decay: must be a finite number, got nan"):
        run_config_from_dict({"optimizer": {"name": "lars", "params": {"weight_decay": float("nan")}}})


def test_a_tilde_in_output_dir_is_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "x.yaml").write_text(BASE + "output_dir: ~/lbtrain-results\n")
    experiment = load_experiment(tmp_path / "x.yaml")
    assert experiment.results_dir == tmp_path / "home" / "lbtrain-results" / "x"
    assert not os.path.exists("~")
