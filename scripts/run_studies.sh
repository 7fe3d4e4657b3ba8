#!/bin/sh
# The second-edition studies behind results/README.md, in order; each is resumable (a rerun
# skips finished trials and runs); then their reports and the page rendered from all committed
# studies. `make study` runs this (on 2 cores: goyal_bn about 2.5 hours, warmup_ablation and
# keskar_v2 about 30 minutes each, adam_scaling and steps_to_target about 20, sync_vs_async about
# 25). The first edition (goyal_scaling, goyal_scaling_cnn, keskar_gap, critical_batch,
# goyal_sweep) stays as committed: it ran before the decay clock moved to step 0, so its YAMLs
# now describe different runs, which a rerun would train beside the committed ones.
set -eu
LBTRAIN=${LBTRAIN:-.venv/bin/lbtrain}
PYTHON=${PYTHON:-.venv/bin/python}
"$LBTRAIN" sweep experiments/goyal_bn.yaml
"$LBTRAIN" report results/goyal_bn
for experiment in warmup_ablation keskar_v2; do
    "$LBTRAIN" run "experiments/$experiment.yaml"
    "$LBTRAIN" report "results/$experiment"
done
"$LBTRAIN" sweep experiments/adam_scaling.yaml
"$LBTRAIN" report results/adam_scaling
"$LBTRAIN" run experiments/steps_to_target.yaml
"$LBTRAIN" report results/steps_to_target --target 0.95
# Synchronous against asynchronous SGD (mode: parameter_server needs tf.keras 2, the make stack).
"$LBTRAIN" run experiments/sync_vs_async_sync.yaml
"$LBTRAIN" run experiments/sync_vs_async_async.yaml
"$LBTRAIN" compare results/sync_vs_async_sync results/sync_vs_async_async --output results/sync_vs_async --target 0.97
"$PYTHON" scripts/render_results_readme.py --write
