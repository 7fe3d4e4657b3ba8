"""lab.elasticity: every arm of the elasticity study against the fixed world of 4,
by the repository's intervals and decision rule, its prose numbers from its record; and on a tiny
real elastic experiment, the section in the report, its figures, and the learning rate rebuilt
per step as the runs applied it."""

import json

import pytest

from lab import elasticity as render_elasticity
from lbtrain.config import ExperimentConfig
from lbtrain.reports.prose import unsupported_numbers
from lbtrain.reports.statistics import difference_interval, mean_interval
from lbtrain.reports.tables import RunRecord, load_records
from lbtrain.results import RunResult
from lbtrain.studies.runner import run_experiment

SCHEDULE = {"0": 4, "1024": 2, "2048": 4}


def synthetic(label, seed, test, *, world=4, elastic=None, status="ok", changes=(), steps=32):
    """A finished run of batch 32 per worker on a budget of 4096 samples."""
    config = {"lr": {"base_lr": 0.05, "base_batch": 128, "rule": "linear", "warmup_epochs": 1, "decay": {"type": "cosine"}},
              "optimizer": {"name": "momentum"}, "data": {"dataset": "synthetic"},
              "training": {"world_size": world, "per_worker_batch": 32, "samples": 4096, "elastic": elastic}}
    row = {"run_id": f"{label}-{seed}", "label": label, "status": status, "world_size": world, "global_batch": 32 * world,
           "seed": seed, "test_accuracy": test}
    metrics = {"samples_trained": 4096} if elastic else {}  # what an elastic run records (fixed runs: steps x batch)
    return RunRecord(row, RunResult(config=config, status=status, global_batch=32 * world, total_steps=steps, world_changes=list(changes),
                                    metrics=metrics))


CHANGES = [{"step": 8, "samples": 1024, "old_world_size": 4, "new_world_size": 2, "old_lr": 0.04, "new_lr": 0.02, "applied_lr": 0.02},
           {"step": 24, "samples": 2048, "old_world_size": 2, "new_world_size": 4, "old_lr": 0.01, "new_lr": 0.02, "applied_lr": 0.015}]
FIXED_4 = [0.880, 0.884, 0.882, 0.886, 0.881]
FOLLOW = [0.879, 0.885, 0.881, 0.884, 0.883]
KEEP = [0.850, 0.856, 0.848, 0.855, 0.70]  # the last seed diverged: never averaged in


@pytest.fixture
def records():
    follow = {"world_sizes": SCHEDULE, "unit": "samples", "lr": "follow", "rewarmup_steps": 4}
    keep = {"world_sizes": SCHEDULE, "unit": "samples", "lr": "keep", "rewarmup_steps": 0}
    return ([synthetic("fixed 4", seed, value) for seed, value in enumerate(FIXED_4)]
            + [synthetic("fixed 2", seed, value, world=2, steps=64) for seed, value in enumerate(FOLLOW)]
            + [synthetic("follow 4-2-4", seed, value, elastic=follow, changes=CHANGES, steps=40) for seed, value in enumerate(FOLLOW)]
            + [synthetic("keep 4-2-4", seed, value, elastic=keep, changes=CHANGES, steps=40,
                         status="diverged" if seed == 4 else "ok") for seed, value in enumerate(KEEP)])


def test_every_arm_is_compared_with_fixed_4_by_welch_and_the_decision_rule(records):
    record = render_elasticity.comparison(records, train_size=1024)
    arms = {arm["recipe"]: arm for arm in record["arms"]}
    assert list(arms) == ["fixed 4", "fixed 2", "follow 4-2-4", "keep 4-2-4"]
    assert arms["fixed 4"]["difference_from_reference"] is None and arms["fixed 4"]["claim"] is None
    follow = difference_interval(FOLLOW, FIXED_4)
    assert arms["follow 4-2-4"]["difference_from_reference"]["mean"] == pytest.approx(follow.mean)
    assert (arms["follow 4-2-4"]["difference_from_reference"]["low"], arms["follow 4-2-4"]["difference_from_reference"]["high"]) == \
        pytest.approx((follow.low, follow.high))
    assert arms["follow 4-2-4"]["claim"] == "matches" and -0.01 < follow.low
    # the diverged seed is out of the keep arm's mean and counted beside it
    keep = arms["keep 4-2-4"]
    assert keep["test_accuracy"]["mean"] == pytest.approx(mean_interval(KEEP[:4]).mean) and keep["test_accuracy"]["n"] == 4
    assert keep["excluded"] == {"diverged": 1} and keep["runs_text"] == "4 of 5 ok (1 diverged)"
    assert keep["difference_from_reference"]["n"] == 4 and keep["difference_from_reference"]["n_second"] == 5
    assert keep["claim"] == "worse"
    (naive,) = record["naive"]
    loss = difference_interval(KEEP[:4], FOLLOW)
    assert naive["schedule"] == "4-2-4" and naive["difference"]["mean"] == pytest.approx(loss.mean) and naive["claim"] == "worse"


def test_samples_budget_and_regime_are_counted_from_the_runs(records):
    record = render_elasticity.comparison(records, train_size=1024)
    arms = {arm["recipe"]: arm for arm in record["arms"]}
    # 8 steps of 128, 16 of 64, 16 of 128: 1024 + 1024 + 2048
    assert arms["follow 4-2-4"]["samples"] == [4096] and arms["fixed 2"]["samples"] == [4096] and record["budget"]["equal"]
    assert arms["follow 4-2-4"]["global_batches"] == [128, 64, 128] and arms["follow 4-2-4"]["points"] == [0, 1024, 2048]
    assert record["regime"] == {"largest_global_batch": 128, "fraction": 0.125, "reference_updates": [32], "fewest_updates": 32,
                                "most_updates": 64}
    assert record["budget"]["epochs"] == 4.0


def test_the_section_states_only_numbers_from_its_record(records):
    record = render_elasticity.comparison(records, train_size=1024)
    text = render_elasticity.section_markdown(record)
    assert unsupported_numbers(text, record) == []
    assert "Excluded from the means: `keep 4-2-4` 4 of 5 ok (1 diverged)." in text
    assert "`follow 4-2-4` matches (" in text and "`keep 4-2-4` worse (" in text and "its interval lies below 0" in text
    assert "| follow 4-2-4 | 24 | 2048 | 2 → 4 | 0.01 → 0.02 | 0.015 |" in text
    edited = text.replace("every arm trained 4096 samples", "every arm trained 4097 samples")
    assert [token for token, _ in unsupported_numbers(edited, record)] == ["4097"]


def test_the_naive_schedule_runs_out_where_its_steps_do(records):
    """keep 4-2-4 on 4096 samples: 32 steps of batch 128 planned; 8 of 128, then 16 of 64 (step
    24 at 2048 samples), then batch 128 from there: the planned steps end at step 32, 3072 samples."""
    record = render_elasticity.comparison(records, train_size=1024)
    samples = [128 * s for s in range(8)] + [1024 + 64 * s for s in range(16)] + [2048 + 128 * s for s in range(16)]
    applied = {"keep 4-2-4": (samples, [0.1] * 40)}
    render_elasticity.schedule_run_out(record, applied)
    arms = {arm["recipe"]: arm for arm in record["arms"]}
    assert arms["keep 4-2-4"]["lr_runs_out_at"] == {"samples": 3072, "share": 0.75} and "lr_runs_out_at" not in arms["follow 4-2-4"]
    # keep applied 0.02 at the first change, follow 0.02 too in these made-up changes
    assert record["naive"][0]["lr_ratio_after_first_change"] == 1.0
    text = render_elasticity.section_markdown(record)
    assert "from 3072 samples for `keep 4-2-4` (75.0% of the budget)" in text and unsupported_numbers(text, record) == []


def test_a_missing_reference_arm_is_an_error(records):
    with pytest.raises(ValueError, match="no run of the reference arm 'fixed 4'"):
        render_elasticity.comparison([r for r in records if r.recipe != "fixed 4"], train_size=1024)


@pytest.fixture(scope="module")
def tiny_elastic(tmp_path_factory):
    """MNIST-1D, 288 training samples, 8 per worker, 2304 samples (8 epochs): fixed worlds of 4
    and 2, and 4 -> 2 -> 4 by samples with the LR following (re-warmed over 4 steps) or kept; 2 seeds."""
    root = tmp_path_factory.mktemp("elastic")
    schedule = {0: 4, 768: 2, 1536: 4}
    experiment = ExperimentConfig.model_validate({
        "name": "tiny_elastic", "description": "a tiny elastic study", "output_dir": str(root),
        "data": {"dataset": "mnist1d", "train_subset": 384, "validation_split": 0.25, "options": {"num_samples": 600}},
        "model": {"name": "mlp", "options": {"widths": [32]}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.05, "base_batch": 16, "rule": "linear", "warmup_epochs": 1, "decay": {"type": "cosine"}},
        "training": {"world_size": 4, "per_worker_batch": 8, "epochs": None, "samples": 2304, "checkpoint": False},
        "grid": {"seeds": [0, 1], "variants": [
            {"label": "fixed 4"}, {"label": "fixed 2", "training.world_size": 2},
            {"label": "follow 4-2-4", "training.elastic": {"world_sizes": schedule, "unit": "samples", "lr": "follow", "rewarmup_steps": 4}},
            {"label": "keep 4-2-4", "training.elastic": {"world_sizes": schedule, "unit": "samples", "lr": "keep"}}]},
    })
    run_experiment(experiment, progress=lambda line: None)
    return root / "tiny_elastic"


def test_render_writes_the_section_before_the_accuracy_table_its_record_and_figures(tiny_elastic):
    written = render_elasticity.render(tiny_elastic)
    text = (tiny_elastic / "report.md").read_text()
    record = json.loads((tiny_elastic / "report.json").read_text())
    assert {path.name for path in written} == {"elasticity_vs_fixed_4.png", "elasticity_lr.png", "report.json", "report.md"}
    assert text.index("## Elastic worlds against the fixed world of 4") < text.index("## Accuracy and generalization gap")
    assert record["elasticity"]["reference"] == "fixed 4" and record["elasticity"]["train_size"] == 288
    assert record["elasticity"]["budget"]["samples_trained"] == [2304]
    assert unsupported_numbers(text, record) == []
    assert all((tiny_elastic / "figures" / name).stat().st_size > 0 for name in ("elasticity_vs_fixed_4.png", "elasticity_lr.png"))
    # a second render replaces the section, it does not add one
    render_elasticity.render(tiny_elastic)
    assert (tiny_elastic / "report.md").read_text().count("## Elastic worlds against the fixed world of 4") == 1


def test_the_rebuilt_learning_rate_is_the_rule_at_every_step(tiny_elastic):
    """Past warmup, following the world gives half the world-4 rate at the same samples in world
    2 (the linear rule, the cosine clocked in samples); keep gives world 4's rate at the same step,
    so its cosine ends early; the jump back up ramps over 4 steps from the old rate."""
    runs = {r.recipe: r for r in load_records(tiny_elastic) if r.row["seed"] == 0}
    fixed_samples, fixed = render_elasticity.applied_learning_rates(runs["fixed 4"], 288)
    follow_samples, follow = render_elasticity.applied_learning_rates(runs["follow 4-2-4"], 288)
    _, keep = render_elasticity.applied_learning_rates(runs["keep 4-2-4"], 288)
    at = dict(zip(fixed_samples, fixed))
    assert len(fixed) == 72 and len(follow) == 24 + 48 + 24 and len(keep) == 96
    assert follow[:24] == pytest.approx(fixed[:24], rel=1e-6)
    # world 2, batch 16, from 768 samples to 1536: every other step is at a world-4 step's samples
    shared = [step for step in range(24, 72) if follow_samples[step] in at]
    assert len(shared) == 24 and [follow[step] for step in shared] == pytest.approx([at[follow_samples[step]] / 2 for step in shared], rel=1e-5)
    assert keep[:72] == pytest.approx(fixed, rel=1e-6) and keep[72:] == pytest.approx([0.0] * 24, abs=1e-9)
    change = runs["follow 4-2-4"].result.world_changes[1]
    assert change["step"] == 72 and change["new_world_size"] == 4
    ramp = [change["old_lr"] + (at[follow_samples[72 + i]] - change["old_lr"]) * (i + 1) / 4 for i in range(4)]
    assert follow[72:76] == pytest.approx(ramp, rel=1e-5) and follow[76:] == pytest.approx([at[s] for s in follow_samples[76:]], rel=1e-5)
