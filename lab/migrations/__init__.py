"""One-off migrations of the committed results, kept to show how the files came to be:
``rejudge_results`` (every run judged again by ``lbtrain.verdict`` after lbtrain had one verdict
per run) and ``restate_protocol_intervals`` (protocol studies' intervals estimated again from
their final runs). Each runs as ``python -m lab.migrations.NAME [results/NAME ...]`` from the
repository root."""
