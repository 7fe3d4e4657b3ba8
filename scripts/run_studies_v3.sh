#!/bin/sh
# The third-edition studies (issue: the large-batch questions in the papers' regime), in order;
# each is resumable (a rerun skips finished trials and runs), so run it again after an
# interruption. `make study-v3` runs this. On 2 cores: goyal_v3 about 6 hours (tuning about 2,
# 65 finals and the 3x-longer control about 4), critical_batch_v3 about 2, keskar_v3 about 1.25.
set -eu
LBTRAIN=${LBTRAIN:-.venv/bin/lbtrain}
"$LBTRAIN" sweep experiments/goyal_v3.yaml
"$LBTRAIN" report results/goyal_v3
"$LBTRAIN" run experiments/critical_batch_v3.yaml
"$LBTRAIN" report results/critical_batch_v3 --target 0.89
"$LBTRAIN" run experiments/keskar_v3.yaml
"$LBTRAIN" report results/keskar_v3
