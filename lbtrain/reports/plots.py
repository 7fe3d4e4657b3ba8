"""Figures. Data first, drawing second: what is drawn is plain records (``Line``, ``Mark``)
built by functions the tests check (``lbtrain.reports.report``, ``lbtrain.schedules.schedule_values``);
the functions here only draw them.

Every figure follows the same conventions, so a reader can trust it:

- one colour per recipe from the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal
  Design"; told apart with every common colour-vision deficiency), keyed by recipe order
  (``recipe_colors``) and shared by every figure of a report;
- global batch on a log2 axis, ticked at the measured batches;
- 95% confidence bands, not error bars, where a point has two or more seeds;
- runs that did not finish ok are marks at their batch, never dropped (``x`` diverged, a hollow
  diamond collapsed, ``*`` failed, a hollow square ok-unstable: finished, but its loss blew up
  and came back); bounds are triangles pointing where the true value lies;
- nothing is highlighted as a best: a figure shows every arm's mean and band, and which arm is
  best (on validation, never test) is said in the report's tables by the decision rule;
- one seed's learning curve is a thin line, a mean over seeds a thick one; on a batch axis
  the measured points are dotted;
- a line never vouches for a point it does not have (``Line.n``, ``_draw_line``): a point on
  fewer seeds than the line's most is an open circle labelled ``n=1``/``n=2`` and the segments
  into and out of it are dashed; where a recipe has no value (no seed ok, or none reached the
  target: its runs are marks at the edge) the line is broken, never drawn across;
- the legend outside the panels.

matplotlib is imported inside the drawing functions (no backend is chosen at import): the
figure is a ``matplotlib.figure.Figure`` rendered by the Agg canvas, without pyplot.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from lbtrain.files import write_atomic
from lbtrain.rounding import floor_tolerant

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from lbtrain.schedules import LearningRateSchedule

# Okabe & Ito's eight colours, yellow late (faint on white); references are drawn in REFERENCE_COLOR.
OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
REFERENCE_COLOR = "#7F7F7F"
REFERENCE_STYLES = ("--", ":", "-.")
# Mark kind -> (marker, filled, legend text). Marks without a y sit on the bottom edge of the
# panel (run statuses) or the top edge ("not reached": more steps than the run had).
MARK_STYLES = {
    "diverged": ("x", True, "diverged run"),
    "collapsed": ("D", False, "collapsed run"),
    "failed": ("*", True, "failed run"),
    "ok-unstable": ("s", False, "unstable run (ok-unstable)"),
    "upper bound": ("v", True, "upper bound (reached in the first epoch)"),
    "not reached": ("^", False, "target not reached"),
}
TOP_EDGE_KINDS = ("not reached",)
# Marks without a y sit in a shaded strip of this fraction of the panel's height, kept clear of data.
EDGE_STRIP = 0.1
PANEL_SIZE = (4.4, 3.3)
LEGEND_WIDTH = 2.4


@dataclasses.dataclass(frozen=True)
class Line:
    """One line of a panel: points ``(x[i], y[i])``, a 95% band ``low[i]..high[i]`` where both
    are given (None elsewhere), in the colour of ``label`` (a recipe); ``thin`` for one seed's
    curve; ``reference`` lines (perfect scaling, a fit, a rule) are grey and dashed, their label
    in the legend.

    ``n[i]``, when given, is how many seeds point i rests on: a point on fewer than the line's
    most is drawn open, labelled ``n=k``, with dashed segments into and out of it; a point with
    ``n[i] = 0`` has no value (``y[i]`` None) and breaks the line, and its runs must be marks at
    its x (figures show failures)."""

    label: str
    x: Sequence[float]
    y: Sequence[float | None]
    low: Sequence[float | None] | None = None
    high: Sequence[float | None] | None = None
    thin: bool = False
    reference: bool = False
    n: Sequence[int] | None = None


@dataclasses.dataclass(frozen=True)
class Mark:
    """A point that is not a measured mean: ``count`` runs of ``recipe`` at ``x`` that ended
    ``kind`` (a ``MARK_STYLES`` key), at height ``y`` or, when None, on the panel's edge."""

    kind: str
    recipe: str
    x: float
    y: float | None = None
    count: int = 1

    def __post_init__(self):
        if self.kind not in MARK_STYLES:
            raise ValueError(f"mark kind must be one of {', '.join(MARK_STYLES)}, got {self.kind!r}")


def recipe_colors(labels: Sequence[str]) -> dict[str, str]:
    """Each label's Okabe-Ito colour, by position (past eight labels the palette repeats).

    >>> recipe_colors(["linear", "sqrt"])
    {'linear': '#0072B2', 'sqrt': '#D55E00'}
    """
    return {label: OKABE_ITO[index % len(OKABE_ITO)] for index, label in enumerate(dict.fromkeys(labels))}


def plot_schedules(
    schedules: Mapping[str, LearningRateSchedule | float],
    steps: int,
    path: str | os.PathLike,
    *,
    title: str = "Learning-rate schedules",
    log_scale: bool = False,
) -> Path:
    """Draws ``lr(step)`` for steps 0..steps-1, one line per label, into one PNG at ``path``.

    Returns the path written (its folder is created; the file is replaced atomically)."""
    from lbtrain.schedules import schedule_values

    if steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not schedules:
        raise ValueError("schedules must name at least one schedule")
    lines = [Line(label, list(range(steps)), list(schedule_values(schedule, steps))) for label, schedule in schedules.items()]
    return plot_panels({title: lines}, path, xlabel="step", ylabel="learning rate", log_y=log_scale)


def _reference_styles(panels: Mapping[str, Sequence[Line | Mark]]) -> dict[str, str]:
    """Each reference label's dash style, by order of appearance over all panels."""
    labels = dict.fromkeys(item.label for items in panels.values() for item in items if isinstance(item, Line) and item.reference)
    return {label: REFERENCE_STYLES[index % len(REFERENCE_STYLES)] for index, label in enumerate(labels)}


def _colors_of(panels: Mapping[str, Sequence[Line | Mark]], colors: Mapping[str, str] | None) -> dict[str, str]:
    """``colors`` extended, in order of appearance, to every label it lacks."""
    labels = [item.label if isinstance(item, Line) else item.recipe for items in panels.values() for item in items
              if not (isinstance(item, Line) and item.reference)]
    known = dict(colors or {})
    extra = [label for label in dict.fromkeys(labels) if label not in known]
    return {**known, **{label: OKABE_ITO[(len(known) + i) % len(OKABE_ITO)] for i, label in enumerate(extra)}}


SHORT_FACE = "white"  # the face of a point on fewer seeds than its line's most (an open circle)
SHORT_STYLE = "--"  # the segments into and out of it
SHORT_LEGEND = "point on fewer seeds (n=k)"


def _gaps(line: Line, marks: Sequence[Mark]) -> list[float]:
    """The x where ``line``'s recipe has marks (runs that gave it no value) strictly inside the
    line's span, but the line no point: the line is broken there. Only for a line whose x rise."""
    xs = list(line.x)
    if line.reference or len(xs) < 2 or any(b <= a for a, b in zip(xs, xs[1:])):
        return []
    points = set(xs)
    return sorted({mark.x for mark in marks if mark.recipe == line.label and xs[0] < mark.x < xs[-1] and mark.x not in points})


def _points(line: Line, gaps: Sequence[float]) -> list[tuple[float, float, float, float, int | None]]:
    """``(x, y, low, high, n)`` of each point in x order, NaN for a missing value (None) and at
    each gap (n = 0 there)."""
    def value(values: Sequence[float | None] | None, index: int) -> float:
        item = None if values is None else values[index]
        return math.nan if item is None else float(item)

    points = [(float(x), value(line.y, i), value(line.low, i), value(line.high, i), None if line.n is None else int(line.n[i]))
              for i, x in enumerate(line.x)]
    points += [(float(x), math.nan, math.nan, math.nan, 0) for x in gaps]
    return sorted(points, key=lambda point: point[0]) if gaps else points


def short_points(line: Line) -> list[int]:
    """The indices of ``line``'s points on fewer seeds than its most (none when ``n`` is not
    given), leaving out those without a value (n = 0).

    >>> short_points(Line("a", [32, 64, 128], [0.9, 0.8, 0.7], n=[3, 1, 3]))
    [1]
    """
    if line.n is None or line.reference or line.thin:
        return []
    most = max(line.n, default=0)
    return [i for i, n in enumerate(line.n) if 0 < n < most]


def _runs(indices: Sequence[int]) -> list[list[int]]:
    """Consecutive integers grouped: [1, 2, 4] -> [[1, 2], [4]]."""
    groups: list[list[int]] = []
    for index in indices:
        if groups and groups[-1][-1] == index - 1:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def _draw_line(axes: Axes, line: Line, color: str, reference_style: str, beside_seeds: bool, dotted: bool,
               gaps: Sequence[float] = ()) -> None:
    """A reference grey in its dash style; else the line in ``color`` (thin for a seed, thick
    for a mean beside seeds, dotted at measured points and at a lone point), with its band or,
    for a single point, its interval as a bar. The line is broken at points without a value and
    at ``gaps``; a point on fewer seeds than the line's most is an open circle labelled ``n=k``,
    the segments into and out of it dashed (module doc)."""
    if line.reference:
        axes.plot(line.x, line.y, color=REFERENCE_COLOR, linestyle=reference_style, linewidth=1.2)
        return
    style = {"linewidth": 0.8, "alpha": 0.6} if line.thin else {"linewidth": 2.2 if beside_seeds else 1.6}
    marker = {"marker": "o", "markersize": 3.5} if (dotted or len(line.x) == 1) and not line.thin else {}
    points = _points(line, gaps)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    most = max((p[4] or 0 for p in points), default=0)
    short = [] if line.thin else [i for i, p in enumerate(points) if p[4] is not None and 0 < p[4] < most]
    if not short:
        axes.plot(xs, ys, color=color, **style, **marker)
    else:
        # Solid between two points on the line's most seeds; dashed along every segment that
        # touches a short point; the short points open, with their n.
        axes.plot(xs, [math.nan if i in short else y for i, y in enumerate(ys)], color=color, **style, **marker)
        dashed = sorted({j for i in short for j in (i - 1, i) if 0 <= j < len(points) - 1
                         and not math.isnan(ys[j]) and not math.isnan(ys[j + 1])})
        for run in _runs(dashed):
            span = range(run[0], run[-1] + 2)
            axes.plot([xs[j] for j in span], [ys[j] for j in span], color=color, linestyle=SHORT_STYLE, **style)
        axes.plot([xs[i] for i in short], [ys[i] for i in short], linestyle="none", marker="o", markersize=6, markeredgewidth=1.5,
                  color=color, markerfacecolor=SHORT_FACE, zorder=4)
        for i in short:
            axes.annotate(f"n={points[i][4]}", (xs[i], ys[i]), xytext=(0, 5), textcoords="offset points", ha="center",
                          va="bottom", fontsize=6.5, color=color)
    if line.low is None or line.high is None:
        return
    low, high = [p[2] for p in points], [p[3] for p in points]
    if len(line.x) == 1:
        axes.vlines(line.x, low, high, color=color, alpha=0.5, linewidth=5)
    else:
        axes.fill_between(xs, low, high, color=color, alpha=0.2, linewidth=0)


def _draw_mark(axes: Axes, mark: Mark, color: str, x: float) -> None:
    """The mark's marker in ``color`` at ``x``: at its y, or inside its edge strip; its count
    above it when more than one run."""
    marker, filled, _ = MARK_STYLES[mark.kind]
    if mark.y is None:
        height = (1 - EDGE_STRIP if mark.kind in TOP_EDGE_KINDS else 0) + 0.35 * EDGE_STRIP
        position = {"transform": axes.get_xaxis_transform(), "clip_on": False}
    else:
        height, position = mark.y, {}
    face = color if filled else "none"
    axes.plot([x], [height], linestyle="none", marker=marker, markersize=7, markeredgewidth=2, color=color,
              markerfacecolor=face, zorder=5, **position)
    if mark.count > 1:
        axes.annotate(str(mark.count), (x, height), xycoords=position.get("transform", "data"), xytext=(0, 4.5),
                      textcoords="offset points", ha="center", va="bottom", fontsize=6.5, color=color)


def _mark_offsets(marks: Sequence[Mark], order: Sequence[str], log2_x: bool) -> dict[int, float]:
    """On a batch (log2) axis, the marks at one batch side by side, so none hides another:
    those in the bottom strip, those in the top strip and those at a value each form a group,
    and each (recipe, kind) of a group is shifted by a fifth of an octave from the next,
    centred on the batch, in recipe order."""
    offsets = {id(mark): mark.x for mark in marks}
    groups: dict[tuple[float, str], list[Mark]] = {}
    for mark in marks:
        if log2_x:
            place = "value" if mark.y is not None else "top" if mark.kind in TOP_EDGE_KINDS else "bottom"
            groups.setdefault((mark.x, place), []).append(mark)
    kinds = list(MARK_STYLES)
    for group in groups.values():
        group.sort(key=lambda mark: (order.index(mark.recipe), kinds.index(mark.kind)))
        for index, mark in enumerate(group):
            offsets[id(mark)] = mark.x * 2 ** (0.2 * (index - (len(group) - 1) / 2))
    return offsets


def _log_label(value: float, _position: int) -> str:
    """Plain numbers at 1, 2, 3 and 5 times a power of ten on a log axis ("200", "0.05"), none
    between (they would crowd)."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** floor_tolerant(math.log10(value))
    return f"{value:g}" if any(abs(mantissa - m) < 1e-6 for m in (1, 2, 3, 5)) else ""


def _widen_for_strips(axes: Axes, bottom: bool, top: bool) -> None:
    """Widens the y range so the data keep clear of the edge strips (``EDGE_STRIP`` of the
    height each, in log space on a log axis), and drops the y ticks inside the strips: a mark
    there is a status, not a value."""
    if not (bottom or top):
        return
    log = axes.get_yscale() == "log"
    if log and axes.get_ylim()[0] <= 0:
        axes.set_ylim(1, 10)  # a log panel of marks only: no data set its range
    low, high = axes.get_ylim()
    scale, unscale = (math.log, math.exp) if log else (float, float)
    low, high = scale(low), scale(high)
    share, span = EDGE_STRIP / (1 - EDGE_STRIP * (bottom + top)), high - low
    data = (unscale(low), unscale(high))
    axes.set_ylim(unscale(low - share * span * bottom), unscale(high + share * span * top))
    for minor in (False, True):
        axes.set_yticks([tick for tick in axes.get_yticks(minor=minor) if data[0] <= tick <= data[1]], minor=minor)


def _shade_strips(axes: Axes, bottom: bool, top: bool) -> None:
    """Shades the edge strips, where marks without a y sit."""
    for edge in [0.0] * bottom + [1 - EDGE_STRIP] * top:
        axes.fill_between([0, 1], edge, edge + EDGE_STRIP, color=REFERENCE_COLOR, alpha=0.1, linewidth=0, transform=axes.transAxes)


def _set_batch_ticks(axes: Axes, items: Sequence[Line | Mark]) -> None:
    """A log2 x axis ticked (without minor ticks) at the batches measured, up to 12 of them."""
    from matplotlib.ticker import NullLocator

    axes.set_xscale("log", base=2)
    measured = [x for item in items if isinstance(item, Line) and not item.reference for x in item.x]
    batches = sorted({float(x) for x in measured + [item.x for item in items if isinstance(item, Mark)]})
    if 0 < len(batches) <= 12:
        axes.set_xticks(batches, [f"{batch:g}" for batch in batches], fontsize=8)
        axes.xaxis.set_minor_locator(NullLocator())


SEED_BAND = "95% CI (Student-t over seeds)"


def _legend_handles(panels: Mapping[str, Sequence[Line | Mark]], colors: Mapping[str, str], styles: Mapping[str, str],
                    band_label: str) -> list:
    """Recipes (colour), then reference lines (their labels), seed/mean styles, the band and
    the kinds of marks present, in that order."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    items = [item for panel in panels.values() for item in panel]
    lines = [item for item in items if isinstance(item, Line)]
    labels = [label for label in colors if any((isinstance(i, Line) and not i.reference and i.label == label)
                                               or (isinstance(i, Mark) and i.recipe == label) for i in items)]
    handles = [Line2D([], [], color=colors[label], linewidth=2, label=label) for label in labels]
    handles += [Line2D([], [], color=REFERENCE_COLOR, linestyle=style, label=label) for label, style in styles.items()]
    if any(line.thin for line in lines):
        handles += [Line2D([], [], color=REFERENCE_COLOR, linewidth=0.8, label="one seed")]
        if any(not line.thin and not line.reference for line in lines):
            handles += [Line2D([], [], color=REFERENCE_COLOR, linewidth=2.2, label="mean of ok seeds")]
    if any(value is not None for line in lines for value in (line.low or [])):
        handles.append(Patch(color=REFERENCE_COLOR, alpha=0.3, label=band_label))
    if any(short_points(line) for line in lines):
        handles.append(Line2D([], [], color=REFERENCE_COLOR, linestyle=SHORT_STYLE, linewidth=1.6, marker="o", markersize=6,
                              markeredgewidth=1.5, markerfacecolor=SHORT_FACE, label=SHORT_LEGEND))
    for kind, (marker, filled, text) in MARK_STYLES.items():
        if any(isinstance(item, Mark) and item.kind == kind for item in items):
            handles.append(Line2D([], [], linestyle="none", marker=marker, markersize=7, markeredgewidth=2, color=REFERENCE_COLOR,
                                  markerfacecolor=REFERENCE_COLOR if filled else "none", label=text))
    return handles


def _check_marked(lines: Sequence[Line], marks: Sequence[Mark]) -> None:
    """Refuses a line whose ``n`` does not match its points (a count each; n = 0 exactly where
    there is no value), and a point without a value whose recipe has no mark at its x: figures
    show failures."""
    for line in lines:
        if line.n is not None and len(line.n) != len(line.x):
            raise ValueError(f"line {line.label!r}: n has {len(line.n)} counts for {len(line.x)} points")
        for i, (x, y) in enumerate(zip(line.x, line.y)):
            n = None if line.n is None else line.n[i]
            if n is not None and (n < 0 or (y is None) != (n == 0)):
                raise ValueError(f"line {line.label!r} at x = {x:g}: n = {n} with value {y!r} (n = 0 exactly where there is no value)")
            if y is None and not any(mark.recipe == line.label and mark.x == x for mark in marks):
                raise ValueError(f"line {line.label!r} has no value at x = {x:g} and no mark there: mark its runs (figures show failures)")


def _draw_panel(axes: Axes, items: Sequence[Line | Mark], colors: Mapping[str, str], styles: Mapping[str, str], *,
                log2_x: bool, log_y: bool) -> None:
    """One panel's lines, then its marks, and its axes' scales and ticks."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    lines = [item for item in items if isinstance(item, Line)]
    marks = [item for item in items if isinstance(item, Mark)]
    beside_seeds = any(line.thin for line in lines)
    _check_marked(lines, marks)
    for line in lines:
        _draw_line(axes, line, colors.get(line.label, REFERENCE_COLOR), styles.get(line.label, "-"), beside_seeds, dotted=log2_x,
                   gaps=_gaps(line, marks))
    offsets = _mark_offsets(marks, list(colors), log2_x)
    for mark in marks:
        _draw_mark(axes, mark, colors[mark.recipe], offsets[id(mark)])
    if log2_x:
        _set_batch_ticks(axes, items)
    else:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    if log_y:
        axes.set_yscale("log")
        axes.yaxis.set_major_formatter(FuncFormatter(_log_label))
        axes.yaxis.set_minor_formatter(FuncFormatter(_log_label))
    axes.grid(alpha=0.3)


def _place_strips(panel_axes: Sequence[Axes], panels: Sequence[Sequence[Line | Mark]], share_y: bool) -> None:
    """Bottom and top strips where a panel has edge marks (in every panel when they share y,
    whose range is then widened once)."""
    edges = [(any(isinstance(i, Mark) and i.y is None and i.kind not in TOP_EDGE_KINDS for i in items),
              any(isinstance(i, Mark) and i.y is None and i.kind in TOP_EDGE_KINDS for i in items)) for items in panels]
    if share_y:
        edges = [(any(bottom for bottom, _ in edges), any(top for _, top in edges))] * len(edges)
        _widen_for_strips(panel_axes[0], *edges[0])
    for axes, (bottom, top) in zip(panel_axes, edges):
        if not share_y:
            _widen_for_strips(axes, bottom, top)
        _shade_strips(axes, bottom, top)


def draw_panels(
    panels: Mapping[str, Sequence[Line | Mark]],
    *,
    xlabel: str,
    ylabel: str,
    colors: Mapping[str, str] | None = None,
    log2_x: bool = False,
    log_y: bool = False,
    share_y: bool = True,
    band_label: str = SEED_BAND,
    x_labels: Mapping[float, str] | None = None,
) -> Figure:
    """One panel per title (at most 3 a row) with its lines and marks (module doc), the legend
    outside on the right; returns the figure. ``colors`` maps recipes to colours (a report
    passes one mapping to all its figures); labels it lacks get the next palette colours.
    ``x_labels`` makes x categorical: ticks at its keys, labelled with its values."""
    from matplotlib.figure import Figure

    if not panels or not any(panels.values()):
        raise ValueError("nothing to draw: every panel is empty")
    colors, styles = _colors_of(panels, colors), _reference_styles(panels)
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure = Figure(figsize=(PANEL_SIZE[0] * columns + LEGEND_WIDTH, PANEL_SIZE[1] * rows), layout="constrained")
    grid = figure.subplots(rows, columns, squeeze=False, sharey=share_y)
    for axes, (title, items) in zip(grid.flat, panels.items()):
        _draw_panel(axes, items, colors, styles, log2_x=log2_x, log_y=log_y)
        if x_labels:
            axes.set_xticks(list(x_labels), list(x_labels.values()), fontsize=7, rotation=30, ha="right")
            axes.set_xlim(min(x_labels) - 0.5, max(x_labels) + 0.5)
        axes.set_title(title, fontsize=10)
        axes.set_xlabel(xlabel)
    _place_strips(list(grid.flat[:len(panels)]), list(panels.values()), share_y)
    for axes in grid.flat[len(panels):]:
        axes.set_visible(False)
    for axes in grid[:, 0] if share_y else grid.flat:
        axes.set_ylabel(ylabel)
    figure.legend(handles=_legend_handles(panels, colors, styles, band_label), loc="outside right upper", fontsize=8, frameon=False)
    return figure


def plot_panels(panels: Mapping[str, Sequence[Line | Mark]], path: str | os.PathLike, **options) -> Path:
    """``draw_panels(panels, **options)`` saved as a PNG at ``path`` (replaced atomically);
    returns the path."""
    figure = draw_panels(panels, **options)
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=100)
    return write_atomic(Path(path), image.getvalue())
