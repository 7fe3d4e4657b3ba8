#!/bin/sh
# The canonical studies behind results/README.md, in order; each is resumable (a rerun skips
# finished runs and tops up sweeps); then their reports. `make study` runs this.
set -eu
LBTRAIN=${LBTRAIN:-.venv/bin/lbtrain}
for experiment in goyal_scaling goyal_scaling_cnn keskar_gap critical_batch; do
    "$LBTRAIN" run "experiments/$experiment.yaml"
done
"$LBTRAIN" report results/goyal_scaling --target 0.85
"$LBTRAIN" report results/goyal_scaling_cnn
"$LBTRAIN" report results/keskar_gap
# Most batch sizes reach 0.85 within the budget; the largest never do (shown as not reached).
"$LBTRAIN" report results/critical_batch --target 0.85
"$LBTRAIN" sweep experiments/goyal_sweep.yaml
"$LBTRAIN" report results/goyal_sweep
