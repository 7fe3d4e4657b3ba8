"""The keys of a learning-rate recipe and their defaults, without TensorFlow: the config schema
(``lbtrain.config``) validates them and ``lbtrain.schedules`` builds the schedule from them."""

# Goyal et al. 2017 sec. 2.2: a ramp from the start to the target, or the start held constant.
WARMUP_TYPES = ("gradual", "constant")

# When the decay's step 0 is: the run's first step (Goyal et al. 2017), or the first step after warmup.
DECAY_CLOCKS = ("from_step_0", "after_warmup")

SCHEDULE_KEYS = {"rule": "linear", "warmup_epochs": 0, "warmup_start": None, "warmup_type": "gradual", "decay": None,
                 "decay_clock": "from_step_0"}
