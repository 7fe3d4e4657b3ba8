"""Throughput benchmarking (``lbtrain bench``): lbtrain's tf_cnn_benchmarks.

Every configuration (a model, a per-worker batch, a world) trains with momentum SGD on synthetic
data in a fresh process of its own, which also measures the input pipeline the trainer would
build for that run, alone and feeding the step; ``bound`` says which of the two limits the run.
By concern:

- ``worlds``: the worlds measured (``single``, ``simulated:W``, ``horovod:N``, ``independent:N``,
  ``mirrored:N``), the mode each stands for and whether it can run here;
- ``settings``: how every configuration is measured (``Settings``);
- ``cases``: a configuration (``Case``), the models' and the device's checks, and ``measure_case``;
- ``processes``: how a world's processes start and report their one result line;
- ``measure``: what runs inside each of those processes;
- ``flops``: training FLOPs per sample and the machine's matmul peak;
- ``timeline``: the share of the measured time Horovod spent in allreduce;
- ``report``: rows, ratios, ``bench.csv``, ``bench.json``, ``bench.png``, the text table;
- ``matrix``: ``run_benchmark``, the whole matrix.

Names load lazily from those modules (``from lbtrain.bench import run_benchmark``).
"""

from lbtrain._lazy import lazy_exports

_LOCATIONS = {
    **dict.fromkeys(("DEFAULT_WORLDS", "WORLD_KINDS", "BenchError", "WorldKind", "WorldSpec", "check_worlds", "world_problem"), ".worlds"),
    **dict.fromkeys(("DEFAULT_BATCHES", "DEFAULT_MODELS", "DEVICES", "GPU_MODELS", "MIN_STEPS", "RESNET50_INPUT", "ZOO_INPUT", "Case",
                     "bench_input", "check_device", "check_models", "check_models_fit", "default_models", "job_of",
                     "measure_case", "measure_peak_flops", "model_names"), ".cases"),
    "Settings": ".settings",
    **dict.fromkeys(("RESULT_PREFIX", "CaseFailed", "HorovodRanks", "OneProcess", "SideBySide", "Starter"), ".processes"),
    **dict.fromkeys(("PIPELINE_EPOCH_BATCHES", "build_bench_model", "check_job", "fit_problem", "run_job", "trainer_pipeline"), ".measure"),
    **dict.fromkeys(("forward_macs_per_sample", "matmul_peak_flops", "training_flops_per_sample"), ".flops"),
    **dict.fromkeys(("ALLREDUCE_ACTIVITIES", "allreduce_seconds", "read_timeline"), ".timeline"),
    **dict.fromkeys(("COLUMNS", "INPUT_BOUND_MARGIN", "ProgressBar", "add_ratios", "bound_by", "format_table", "machine", "make_row",
                     "plot_throughput", "write_report"), ".report"),
    **dict.fromkeys(("DEFAULT_OUTPUT", "plan", "run_benchmark"), ".matrix"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LOCATIONS)
__all__ = sorted(_LOCATIONS)
