"""The page's own figures follow lbtrain's figure rule (issue 56, item 5): a point on fewer seeds
than its line's others is open, labelled with its n and joined by dashed segments; a staleness
where no run was ok is no point of the line, its runs marks at the edge."""

import shutil
from pathlib import Path

import matplotlib.colors
import matplotlib.image

from helpers import REPO_ROOT
from lab.results_page.asynchrony import STALENESS_LABELS, staleness_figure, staleness_figure_items
from lbtrain.reports.plots import OKABE_ITO, Line, Mark, draw_panels

RESULTS = Path(REPO_ROOT) / "results"


def test_the_staleness_figure_marks_its_one_seed_point_and_joins_nothing_past_the_diverged_staleness(tmp_path):
    shutil.copytree(RESULTS / "staleness", tmp_path / "staleness", ignore=shutil.ignore_patterns("figures"))
    items = staleness_figure_items(tmp_path)
    undamped = next(item for item in items if isinstance(item, Line) and item.label == STALENESS_LABELS["none"])
    # The committed study: 3 ok seeds at tau 0, 1, 3; one at tau 7 (two collapsed); none at tau 15 (three diverged).
    assert undamped.x == [1, 2, 4, 8] and undamped.n == [3, 3, 3, 1] and undamped.low[-1] is None
    assert [item for item in items if isinstance(item, Mark) and item.recipe == undamped.label] == [
        Mark("collapsed", undamped.label, 8, count=2), Mark("diverged", undamped.label, 16, count=3)]

    figure = draw_panels({"test accuracy against the staleness": items}, xlabel="workers", ylabel="test accuracy", log2_x=True)
    (axes,) = figure.axes
    color = OKABE_ITO[0]  # the undamped line's, the first recipe
    mine = [line for line in axes.get_lines() if matplotlib.colors.to_hex(line.get_color()).upper() == color]
    dashed = [line for line in mine if line.get_linestyle() == "--"]
    opened = [line for line in mine if line.get_marker() == "o" and line.get_linestyle() == "None"]
    assert [list(line.get_xdata()) for line in dashed] == [[4, 8]]  # into the one-seed point, dashed
    assert [list(line.get_xdata()) for line in opened] == [[8]]
    assert matplotlib.colors.to_hex(opened[0].get_markerfacecolor()) == "#ffffff"
    assert [text.get_text() for text in axes.texts if text.get_text().startswith("n=")] == ["n=1"]
    assert max(x for line in mine if line.get_linestyle() != "None" for x, y in zip(line.get_xdata(), line.get_ydata())
               if y == y) == 8  # no line reaches 16, where every run diverged: a mark there

    path = staleness_figure(tmp_path)
    assert path == tmp_path / "staleness" / "figures" / "accuracy_vs_staleness.png"
    assert matplotlib.image.imread(path).shape[2] == 4
