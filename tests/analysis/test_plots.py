import matplotlib.image
import numpy as np
import pytest

from lbtrain.analysis.plots import Line, plot_lines, plot_schedules
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
    assert image.shape == (360, 600, 4)
    assert len(np.unique(image.reshape(-1, 4), axis=0)) > 20
    assert sorted(p.name for p in path.parent.iterdir()) == ["schedules.png"]


def test_plot_schedules_rejects_empty_input(tmp_path):
    with pytest.raises(ValueError, match="schedules must name at least one schedule"):
        plot_schedules({}, 10, tmp_path / "x.png")
    with pytest.raises(ValueError, match="steps must be a positive integer, got 0"):
        plot_schedules({"a": 0.1}, 0, tmp_path / "x.png")


def test_plot_lines_draws_panels_with_error_bars_and_reference_lines(tmp_path):
    panels = {
        "world 1": [Line("a", [128, 256], [0.9, 0.88], error=[0.01, 0.02]), Line("ideal", [128, 256], [0.9, 0.9], dashed=True)],
        "world 8": [Line("a", [1024], [0.85])],
        "world 32": [Line("b", [4096], [0.8])],
        "world 64": [Line("b", [8192], [0.7])],
    }
    path = plot_lines(panels, tmp_path / "lines.png", xlabel="global batch", ylabel="accuracy", log_x=True)
    image = matplotlib.image.imread(path)
    assert image.shape == (720, 1520, 4)  # 4 panels: 3 a row, 2 rows


def test_plot_lines_rejects_nothing_to_draw(tmp_path):
    with pytest.raises(ValueError, match="nothing to draw"):
        plot_lines({"empty": []}, tmp_path / "x.png", xlabel="x", ylabel="y")
    assert not (tmp_path / "x.png").exists()
