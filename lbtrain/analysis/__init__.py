"""Analyses of large-batch runs: plots now; gap tables, sharpness, noise scale to follow."""

from lbtrain.analysis.plots import plot_schedules

__all__ = ["plot_schedules"]
