"""What pruning saves: the same 20-trial sweep without pruning, with the median pruner (the
default) and with asynchronous successive halving.

All sweeps use the same seeded TPE sampler, search space (learning rate, log scale, and
warmup) and data (MNIST-1D, mlp, 8 epochs a trial). Prints the epochs each spent and the best
validation accuracy each found; target: >= 40% fewer epochs with pruning, best value within 0.5
points. Writes results/benchmarks/sweep.json.

    python benchmarks/bench_sweep.py [--trials 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import optuna  # noqa: E402

from lbtrain.config import ExperimentConfig  # noqa: E402
from lbtrain.files import write_json_atomic  # noqa: E402
from lbtrain.studies.sweep import optimize  # noqa: E402

TARGET_SAVING, TARGET_POINTS = 0.40, 0.5


PRUNERS = ("none", "median", "successive_halving")


def experiment(output_dir: str, pruner: str, trials: int) -> ExperimentConfig:
    return ExperimentConfig.model_validate({
        "name": f"bench-{pruner}",
        "output_dir": output_dir,
        "data": {"dataset": "mnist1d", "train_subset": 3000, "validation_split": 0.2, "options": {"num_samples": 5000}},
        "model": {"name": "mlp", "options": {"widths": [128, 128]}},
        "optimizer": {"name": "momentum"},
        "lr": {"base_batch": 64, "rule": "none", "decay": {"type": "cosine"}},
        "training": {"world_size": 1, "per_worker_batch": 64, "epochs": 8},
        "search": {"lr.base_lr": {"type": "float", "low": 1e-4, "high": 3.0, "log": True},
                   "lr.warmup_epochs": {"type": "int", "low": 0, "high": 2}},
        "sweep": {"trials": trials, "pruner": pruner, "pruner_startup_trials": 3, "pruner_warmup_epochs": 0},
    })


def sweep_cost(output_dir: str, pruner: str, trials: int) -> dict:
    study = optimize(experiment(output_dir, pruner, trials), 1, trials)
    finished = study.get_trials(states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED))
    return {
        "epochs": sum(t.user_attrs["epochs_run"] for t in finished),
        "best_validation_accuracy": study.best_value,
        "pruned": sum(t.state == optuna.trial.TrialState.PRUNED for t in finished),
        "trials": len(finished),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--output", default="results/benchmarks/sweep.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = {pruner: sweep_cost(folder, pruner, args.trials) for pruner in PRUNERS}
    baseline = results["none"]
    comparison = {}
    for pruner, figures in results.items():
        print(f"pruner {pruner:<18}: {figures['epochs']:>4} epochs over {figures['trials']} trials "
              f"({figures['pruned']} pruned), best validation accuracy {figures['best_validation_accuracy']:.4f}")
    for pruner in PRUNERS[1:]:
        saving = 1 - results[pruner]["epochs"] / baseline["epochs"]
        points = 100 * (baseline["best_validation_accuracy"] - results[pruner]["best_validation_accuracy"])
        comparison[pruner] = {"epochs_saved": saving, "best_value_points_lost": points}
        print(f"{pruner}: {saving:.1%} fewer epochs (target >= {TARGET_SAVING:.0%}), "
              f"best value lower by {points:.2f} points (target <= {TARGET_POINTS})")
    write_json_atomic(Path(args.output), {
        "benchmark": "sweep pruning", "results": results, "against_no_pruning": comparison,
        "targets": {"epochs_saved": TARGET_SAVING, "points_lost": TARGET_POINTS},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    })
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
