"""The performance table of docs/benchmarks.md (``lab.performance``): rows rendered from the benchmarks' JSON,
and the committed table equal to what the committed JSON renders."""

import os

from helpers import REPO_ROOT
from lab.performance import PAGE, bench_bound_rows, jit_rows, load_results, parallel_rows, pipeline_rows, render_table, table_in


def test_the_performance_table_shows_pipeline_and_fed_over_step_per_model_and_nothing_for_an_older_bench():
    rows = [{"model": "mlp", "world": "single", "images_per_second": 1000.0, "pipeline_images_per_second": 5000.0,
             "fed_images_per_second": 950.0, "bound": "compute-bound"},
            {"model": "glance", "world": "single", "images_per_second": 4000.0, "pipeline_images_per_second": 2000.0,
             "fed_images_per_second": 1500.0, "bound": "input-bound"},
            {"model": "mlp", "world": "simulated:2", "images_per_second": 1.0, "pipeline_images_per_second": 1.0,
             "fed_images_per_second": 1.0, "bound": "input-bound"}]
    pipeline, fed = bench_bound_rows(rows, [64], 1.2, "bench/bench.json")
    assert pipeline.ratio == "mlp 5.0 (compute-bound), glance 0.5 (input-bound)"
    assert pipeline.limit.startswith("input-bound below 1.2: ")
    assert fed.ratio == "mlp 0.950, glance 0.375"
    assert bench_bound_rows([{"model": "mlp", "world": "single", "images_per_second": 1.0}], [64], None, "bench/bench.json") == []


def test_the_performance_table_shows_the_trainer_over_plain_fit_and_what_compiling_gives_per_model():
    seconds = {"trainer_uncompiled": [0.195, 0.199, 0.190], "fit_uncompiled": [0.181, 0.180, 0.185],
               "trainer_compiled": [0.7, 0.7, 0.7], "fit_compiled": [0.7, 0.7, 0.7]}
    result = {"trainer_over_fit_uncompiled": 1.02, "trainer_over_fit_compiled": 1.041, "trainer_compiled_over_uncompiled": 3.7,
              "fit_compiled_over_uncompiled": 3.61, "auto_is_faster_side": True, "epoch_seconds": seconds}
    data = {"targets": {"trainer_over_fit": 1.03}, "settings": {"batch": 256},
            "auto": {"compiled": False, "why": "training.jit_compile is auto and only the CPU is visible"},
            "results": {"cnn_batch_norm": result, "mlp": {**result, "auto_is_faster_side": False}}}
    rows = jit_rows(data)
    assert [(row.ratio, row.target, row.met) for row in rows[:3]] == [
        ("1.020", "<= 1.03", True), ("1.041", "<= 1.03", False), ("trainer 3.700, plain fit 3.610", "", None)]
    assert rows[0].comparison.endswith("(cnn with batch norm, batch 256, uncompiled)")
    # Round by round, trainer minus fit: +14, +19, +5 ms; their median, against fit's median epoch.
    assert "+14 ms an epoch of 0.18 s (medians over rounds)" in rows[0].limit and "+0 ms an epoch of 0.70 s" in rows[1].limit
    assert rows[2].limit == "`jit_compile: auto` does not compile here, the faster side: only the CPU is visible"
    assert rows[5].limit.startswith("`jit_compile: auto` does not compile here, the slower side")
    assert len(rows) == 6 and {row.source for row in rows} == {"jit.json"}


def test_the_performance_table_shows_the_pipeline_without_over_with_the_autotuning_model_per_batch():
    data = {"targets": {"without_over_with": 0.9},
            "batches": {"32": {"without_over_with": 0.861}, "4096": {"without_over_with": 1.166}},
            "deletion": {"without": {"max_seconds": 0.0031}, "with": {"max_seconds": 1.254}}}
    rows = pipeline_rows(data)
    assert [(row.ratio, row.target, row.met) for row in rows] == [("0.861", ">= 0.9", False), ("1.166", ">= 0.9", True)]
    assert rows[1].comparison.endswith("samples/s at batch 4096")
    assert rows[0].limit.endswith("waited at most 0.00 s without the model, 1.25 s with it")


def test_the_performance_table_shows_runs_side_by_side_their_busy_share_and_the_price_error():
    data = {"targets": {"speedup": 1.7, "busy_share": 0.85, "price_error": 0.25}, "workers": 2, "threads": 1,
            "setup": {"runs": 12, "epochs": 6, "grid": "a grid"}, "speedup": 1.84, "busy_share": 0.8, "equal_results": True,
            "price_error": -0.3, "machine": {"cpus": 2, "load_average_before": [3.5, 3.0, 2.0]}}
    speedup, busy, price = parallel_rows(data)
    assert [(row.ratio, row.target, row.met) for row in (speedup, busy, price)] == [
        ("1.84", ">= 1.7", True), ("0.800", ">= 0.85", False), ("0.700", "within +-25%", False)]
    assert speedup.comparison.startswith("`lbtrain run` of a 12-run grid one run at a time / side by side (2 at once x 1 thread)")
    assert "load average 3.5 on 2 cores" in speedup.limit and speedup.limit.endswith("equal results: yes")
    assert len(parallel_rows({**data, "price_error": None})) == 2


def test_the_pages_performance_table_is_the_one_rendered_from_the_committed_json():
    page = open(os.path.join(REPO_ROOT, PAGE)).read()
    assert table_in(page) == render_table(load_results(os.path.join(REPO_ROOT, "results", "benchmarks"))), \
        f"{PAGE}'s performance table is stale: run python scripts/render_benchmarks.py --write"
