#!/bin/sh
# The canonical studies behind results/README.md, in order; each is resumable (a rerun skips
# finished runs and tops up sweeps), and each ends with its report. `make study` runs this.
set -eu
LBTRAIN=${LBTRAIN:-.venv/bin/lbtrain}
for experiment in goyal_scaling goyal_scaling_cnn keskar_gap critical_batch; do
    "$LBTRAIN" run "experiments/$experiment.yaml"
    "$LBTRAIN" report "results/$experiment"
done
"$LBTRAIN" sweep experiments/goyal_sweep.yaml
"$LBTRAIN" report results/goyal_sweep
