import matplotlib.colors
import matplotlib.image
import pytest

from helpers import run_python
from lbtrain.reports.plots import EDGE_STRIP, OKABE_ITO, Line, Mark, draw_panels, plot_panels, plot_schedules, recipe_colors
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
    assert image.shape == (330, 680, 4)  # one 4.4 x 3.3 inch panel and the legend beside it, at 100 dpi
    pixels = {tuple(pixel) for pixel in (image[..., :3] * 255).round().astype(int).reshape(-1, 3)}
    assert all(tuple(round(255 * c) for c in matplotlib.colors.to_rgb(color)) in pixels for color in OKABE_ITO[:3])
    assert sorted(p.name for p in path.parent.iterdir()) == ["schedules.png"]


def test_plot_schedules_rejects_empty_input(tmp_path):
    with pytest.raises(ValueError, match="schedules must name at least one schedule"):
        plot_schedules({}, 10, tmp_path / "x.png")
    with pytest.raises(ValueError, match="steps must be a positive integer, got 0"):
        plot_schedules({"a": 0.1}, 0, tmp_path / "x.png")


def test_recipe_colors_follow_recipe_order_through_the_okabe_ito_palette():
    colors = recipe_colors([f"r{i}" for i in range(10)])
    assert list(colors.values())[:8] == list(OKABE_ITO) and colors["r8"] == OKABE_ITO[0]
    assert recipe_colors(["b", "a", "b"]) == {"b": OKABE_ITO[0], "a": OKABE_ITO[1]}


BATCH_PANEL = {"test accuracy": [
    Line("linear", [128, 1024, 8192], [0.90, 0.88, 0.80], low=[0.89, 0.87, None], high=[0.91, 0.89, None]),
    Line("sqrt", [128, 1024], [0.90, 0.89]),
    Line("perfect", [128, 8192], [0.9, 0.9], reference=True),
    Mark("diverged", "sqrt", 8192, count=2),
    Mark("collapsed", "linear", 8192),
    Mark("upper bound", "sqrt", 128, 0.85),
]}


def test_batch_figures_use_a_log2_axis_ticked_at_the_batches_and_one_colour_per_recipe():
    figure = draw_panels(BATCH_PANEL, xlabel="global batch", ylabel="accuracy", colors={"sqrt": OKABE_ITO[3], "linear": OKABE_ITO[0]},
                         log2_x=True)
    (axes,) = figure.axes
    assert axes.get_xscale() == "log" and axes.xaxis.get_transform().base == 2
    assert [label.get_text() for label in axes.get_xticklabels()] == ["128", "1024", "8192"]
    lines = {line.get_label(): line for line in axes.get_lines()}
    colors = [matplotlib.colors.to_hex(line.get_color()).upper() for line in axes.get_lines()]
    assert colors[:2] == [OKABE_ITO[0], OKABE_ITO[3]]  # the mapping given, not the drawing order
    assert len(lines) == len(axes.get_lines())
    assert len(axes.collections) >= 2  # the band of "linear", and the shaded strip for marks


def test_marks_sit_in_a_strip_clear_of_the_data_and_the_legend_outside_every_panel():
    figure = draw_panels(BATCH_PANEL, xlabel="global batch", ylabel="accuracy", log2_x=True)
    figure.draw_without_rendering()
    (axes,) = figure.axes
    low, high = axes.get_ylim()
    strip_top = low + EDGE_STRIP * (high - low)
    assert strip_top <= 0.80 - 1e-9  # the lowest value drawn stays above the strip
    assert all(tick > strip_top for tick in axes.get_yticks())  # no value is read off the strip
    edge_marks = [line for line in axes.get_lines() if line.get_marker() in ("x", "D")]
    assert sorted(line.get_marker() for line in edge_marks) == ["D", "x"]
    for line in edge_marks:
        (y,) = line.get_ydata()
        assert 0 < y < EDGE_STRIP  # axes fraction, at the bottom
    (x_diverged,) = next(line for line in edge_marks if line.get_marker() == "x").get_xdata()
    (x_collapsed,) = next(line for line in edge_marks if line.get_marker() == "D").get_xdata()
    assert x_collapsed < 8192 < x_diverged  # recipe order, side by side at their batch
    assert [text.get_text() for text in axes.texts] == ["2"]
    (legend,) = figure.legends
    legend_box = legend.get_window_extent()
    assert not legend_box.overlaps(axes.get_window_extent())
    assert [text.get_text() for text in legend.get_texts()] == [
        "linear", "sqrt", "perfect", "95% CI (Student-t over seeds)", "diverged run", "collapsed run",
        "upper bound (reached in the first epoch)"]


def test_thin_seed_lines_and_thick_means_have_legend_entries(tmp_path):
    panels = {"world 1": [Line("a", [1, 2, 3], [0.5, 0.6, 0.7], thin=True), Line("a", [1, 2, 3], [0.6, 0.7, 0.8], thin=True),
                          Line("a", [1, 2, 3], [0.55, 0.65, 0.75]), Mark("diverged", "b", 2, 0.1)],
              "world 8": [Line("b", [1, 2], [0.4, 0.1], thin=True)]}
    figure = draw_panels(panels, xlabel="epoch", ylabel="accuracy")
    first = figure.axes[0]
    widths = [line.get_linewidth() for line in first.get_lines()]
    assert widths[:3] == [0.8, 0.8, 2.2]
    assert [label.get_text() for label in first.get_xticklabels()] == [label.get_text() for label in first.get_xticklabels()
                                                                       if "." not in label.get_text()]  # whole epochs
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["a", "b", "one seed", "mean of ok seeds", "diverged run"]
    path = plot_panels(panels, tmp_path / "curves.png", xlabel="epoch", ylabel="accuracy")
    assert matplotlib.image.imread(path).shape == (330, 2 * 440 + 240, 4)


def test_runs_ok_but_unstable_are_marked_at_their_batch_in_their_recipes_colour():
    from lbtrain.reports.report import status_marks
    from lbtrain.reports.tables import RunRecord
    from lbtrain.results import RunResult

    def run(seed, status):
        row = {"run_id": str(seed), "label": "linear", "status": status, "world_size": 8, "global_batch": 1024, "seed": seed}
        return RunRecord(row, RunResult(config={}, status=status))

    marks = status_marks([run(0, "ok"), run(1, "ok-unstable"), run(2, "ok-unstable")])
    assert marks == [Mark("ok-unstable", "linear", 1024, count=2)]
    figure = draw_panels({"test accuracy": [Line("linear", [128, 1024], [0.9, 0.8]), *marks]}, xlabel="global batch",
                         ylabel="accuracy", colors={"linear": OKABE_ITO[1]}, log2_x=True)
    (axes,) = figure.axes
    (square,) = [line for line in axes.get_lines() if line.get_marker() == "s"]
    assert matplotlib.colors.to_hex(square.get_color()).upper() == OKABE_ITO[1] and square.get_markerfacecolor() == "none"
    assert [text.get_text() for text in axes.texts] == ["2"]
    assert "unstable run (ok-unstable)" in [text.get_text() for text in figure.legends[0].get_texts()]


def test_plot_panels_rejects_nothing_to_draw_and_unknown_marks(tmp_path):
    with pytest.raises(ValueError, match="nothing to draw"):
        plot_panels({"empty": []}, tmp_path / "x.png", xlabel="x", ylabel="y")
    assert not (tmp_path / "x.png").exists()
    with pytest.raises(ValueError, match="mark kind must be one of diverged, collapsed, failed, ok-unstable, upper bound, not reached"):
        Mark("exploded", "a", 1)


def test_importing_the_plots_and_the_report_loads_no_matplotlib():
    result = run_python("import sys, lbtrain.reports.plots, lbtrain.reports.report; print('matplotlib' in sys.modules)")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"


def drawn(axes, color):
    """The lines of ``axes`` in ``color`` (its artists, in drawing order)."""
    return [line for line in axes.get_lines() if matplotlib.colors.to_hex(line.get_color()).upper() == color]


def segments(line):
    """The segments ``line`` draws between finite points, as pairs of x."""
    xs, ys = list(line.get_xdata()), list(line.get_ydata())
    return [(xs[i], xs[i + 1]) for i in range(len(xs) - 1) if not any(y != y for y in (ys[i], ys[i + 1]))]


def test_a_point_on_fewer_seeds_is_open_labelled_and_its_segments_dashed():
    # Three batches with 3, 1 and 3 seeds (the middle one a survivor), and a line with the same seeds everywhere.
    panels = {"steps to target": [Line("linear", [32, 64, 128], [400.0, 250.0, 150.0], low=[380.0, None, 140.0],
                                       high=[420.0, None, 160.0], n=[3, 1, 3]),
                                  Line("sqrt", [32, 64, 128], [400.0, 300.0, 220.0], n=[2, 2, 2]),
                                  Mark("not reached", "linear", 64, count=2)]}
    figure = draw_panels(panels, xlabel="global batch", ylabel="steps", colors={"linear": OKABE_ITO[0], "sqrt": OKABE_ITO[1]},
                         log2_x=True)
    (axes,) = figure.axes
    solid, dashed, opened = drawn(axes, OKABE_ITO[0])[:3]
    assert solid.get_linestyle() == "-" and segments(solid) == []  # no solid segment touches the survivor
    assert dashed.get_linestyle() == "--" and segments(dashed) == [(32, 64), (64, 128)]  # into and out of it, dashed
    assert solid.get_marker() == "o" and matplotlib.colors.to_hex(solid.get_markerfacecolor()).upper() == OKABE_ITO[0]  # filled
    assert list(opened.get_xdata()) == [64] and opened.get_linestyle() == "None" and opened.get_marker() == "o"
    assert matplotlib.colors.to_hex(opened.get_markerfacecolor()) == "#ffffff"  # open
    assert matplotlib.colors.to_hex(opened.get_markeredgecolor()).upper() == OKABE_ITO[0]
    labels = [text for text in axes.texts if text.get_text().startswith("n=")]
    assert [(text.get_text(), text.xy) for text in labels] == [("n=1", (64.0, 250.0))]
    # A line whose points all rest on the same seeds is drawn as before: one solid line, no label.
    (sqrt,) = drawn(axes, OKABE_ITO[1])[:1]
    assert sqrt.get_linestyle() == "-" and segments(sqrt) == [(32, 64), (64, 128)] and len(drawn(axes, OKABE_ITO[1])) == 1
    assert "point on fewer seeds (n=k)" in [text.get_text() for text in figure.legends[0].get_texts()]


def test_a_point_where_no_seed_gave_a_value_breaks_the_line_and_stays_a_mark_at_the_edge():
    # n = 3, 0, 3: every run at 64 diverged. Given as a point without a value, or left out of the line: the same figure.
    mark = Mark("diverged", "linear", 64, count=3)
    for line in (Line("linear", [32, 64, 128], [0.9, None, 0.8], low=[0.88, None, 0.78], high=[0.92, None, 0.82], n=[3, 0, 3]),
                 Line("linear", [32, 128], [0.9, 0.8], low=[0.88, 0.78], high=[0.92, 0.82], n=[3, 3])):
        figure = draw_panels({"test accuracy": [line, mark]}, xlabel="global batch", ylabel="accuracy",
                             colors={"linear": OKABE_ITO[0]}, log2_x=True)
        (axes,) = figure.axes
        line_artist, cross = drawn(axes, OKABE_ITO[0])
        assert line_artist.get_linestyle() == "-" and segments(line_artist) == []  # nothing joins 32 to 128 across 64
        assert [x for x, y in zip(line_artist.get_xdata(), line_artist.get_ydata()) if y == y] == [32, 128]
        assert cross.get_marker() == "x" and 0 < cross.get_ydata()[0] < EDGE_STRIP  # the failures, at the bottom edge
        assert [text.get_text() for text in axes.texts] == ["3"]  # the mark's count; no n label for a point with no value
        bands = [collection for collection in axes.collections if collection.get_paths()
                 and matplotlib.colors.to_hex(collection.get_facecolor()[0]).upper() == OKABE_ITO[0]]
        assert [len(band.get_paths()) for band in bands] == [2]  # the band too, broken in two at 64


def test_a_point_without_a_value_needs_its_runs_marked_and_its_count_zero():
    with pytest.raises(ValueError, match="no value at x = 64 and no mark there"):
        draw_panels({"p": [Line("a", [32, 64, 128], [0.9, None, 0.8], n=[3, 0, 3])]}, xlabel="b", ylabel="y", log2_x=True)
    with pytest.raises(ValueError, match="n = 1 with value None"):
        draw_panels({"p": [Line("a", [32, 64], [0.9, None], n=[3, 1]), Mark("failed", "a", 64)]}, xlabel="b", ylabel="y")
    with pytest.raises(ValueError, match="n has 2 counts for 3 points"):
        draw_panels({"p": [Line("a", [32, 64, 128], [0.9, 0.8, 0.7], n=[3, 1])]}, xlabel="b", ylabel="y")
