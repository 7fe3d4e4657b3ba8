import matplotlib.image
import numpy as np
import pytest

from lbtrain.analysis.plots import plot_schedules
from lbtrain.schedules import Warmup, build_schedule


def test_plot_schedules_writes_one_png_with_a_line_per_schedule(tmp_path):
    schedules = {
        "linear + warmup + cosine": build_schedule({"rule": "linear", "warmup_epochs": 1, "decay": {"type": "cosine"}},
                                                   steps_per_epoch=10, base_lr=0.1, base_batch=128, global_batch=1024, total_epochs=5),
        "sqrt": 0.1 * 8**0.5,
        "warmup": Warmup(0.8, 20),
    }
    path = plot_schedules(schedules, 50, tmp_path / "figures" / "schedules.png")
    assert path == tmp_path / "figures" / "schedules.png"
    image = matplotlib.image.imread(path)
    assert image.shape == (400, 700, 4)
    assert len(np.unique(image.reshape(-1, 4), axis=0)) > 20
    assert sorted(p.name for p in path.parent.iterdir()) == ["schedules.png"]


def test_plot_schedules_rejects_empty_input(tmp_path):
    with pytest.raises(ValueError, match="schedules must name at least one schedule"):
        plot_schedules({}, 10, tmp_path / "x.png")
    with pytest.raises(ValueError, match="steps must be a positive integer, got 0"):
        plot_schedules({"a": 0.1}, 0, tmp_path / "x.png")
