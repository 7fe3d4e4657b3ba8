#!/bin/sh
# The fourth-edition studies (issue 56: designs that survive a reviewer, the break point found,
# a second workload), in order; each is resumable (a rerun skips finished trials and runs), so
# run it again after an interruption and commit each study's optuna.db and runs between sessions.
# `make study-v4` runs this. Priced on 2 cores (each file's `sizing`): goyal_v4 about 2.6-3.2
# machine hours, critical_batch_v4 at most 5.5, keskar_v4 about 2-2.3, adam_vit_v4 about 5.9,
# critical_batch_vit_v4 at most 7.1 (its runs stop at their target, earlier); each advise probe one epoch,
# run once (a probe is not resumable: a committed advice.json is kept).
set -eu
LBTRAIN=${LBTRAIN:-.venv/bin/lbtrain}
"$LBTRAIN" scale experiments/goyal_v4.yaml --world-sizes 1,4,8,16,32,64 --min-updates 800
"$LBTRAIN" report results/goyal_v4
[ -f results/advisor_validation_v4/goyal_v4/advice.json ] ||
    "$LBTRAIN" advise experiments/goyal_v4.yaml --output results/advisor_validation_v4/goyal_v4
"$LBTRAIN" run experiments/critical_batch_v4.yaml
"$LBTRAIN" report results/critical_batch_v4 --target 0.87
"$LBTRAIN" sweep experiments/keskar_v4.yaml
"$LBTRAIN" report results/keskar_v4
"$LBTRAIN" scale experiments/adam_vit_v4.yaml --world-sizes 1,4,16,64 --min-updates 800
"$LBTRAIN" report results/adam_vit_v4
[ -f results/advisor_validation_v4/adam_vit_v4/advice.json ] ||
    "$LBTRAIN" advise experiments/adam_vit_v4.yaml --output results/advisor_validation_v4/adam_vit_v4
"$LBTRAIN" run experiments/critical_batch_vit_v4.yaml
"$LBTRAIN" report results/critical_batch_vit_v4 --target 0.85
