"""``lbtrain scale``: a sound scaling study of the user's own experiment, designed, priced, run
and answered (``design``: what runs; ``study``: price, run, answer)."""

from lbtrain.studies.scale.design import (
    CONTROL_FACTOR,
    FINAL_SEEDS,
    GRID_POINTS,
    ScaleDesign,
    WorldPlan,
    default_world_sizes,
    describe_design,
    design_study,
    parse_world_sizes,
)
from lbtrain.studies.scale.study import (
    TRIM_ORDER,
    Price,
    answer_from_results,
    price_design,
    run_scale,
    training_size,
    trim_to_budget,
)

__all__ = ["CONTROL_FACTOR", "FINAL_SEEDS", "GRID_POINTS", "TRIM_ORDER", "Price", "ScaleDesign",
           "WorldPlan", "answer_from_results", "default_world_sizes", "describe_design", "design_study", "parse_world_sizes",
           "price_design", "run_scale", "training_size", "trim_to_budget"]
