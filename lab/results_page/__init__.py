"""results/README.md, rendered from the committed studies' data.

Every number on that page comes from a study's ``report.json`` (``lbtrain report``),
``protocol.json`` (``lbtrain sweep`` in protocol mode) or ``summary.csv``; the words around
them are fixed here, one module per family of studies (``goyal``, ``keskar``, ``critical_batch``,
``lr_scaling``, ``asynchrony``), each with the anchors judged on its studies (``anchors`` lists
them), and a study that is not committed yet is named with the command that makes it. Headline
numbers carry their 95% Student-t interval, n and df, and differences between recipes Welch's
interval (``lbtrain.reports.statistics``); every claim comes from the one decision rule of
``lbtrain.reports.decisions``. ``tests/lab/test_results_page.py``
checks that the committed page is what this renders.

The README's quickstart table is rendered the same way, from ``make run``'s summary committed
as ``results/quickstart_reference/summary.csv``.

    python scripts/render_results_readme.py            # print the page
    python scripts/render_results_readme.py --write    # write results/README.md and the README's quickstart table

No TensorFlow is loaded.
"""

from lab.results_page.page import (
    PAGE_FILE,
    QUICKSTART_BEGIN,
    QUICKSTART_END,
    SECTIONS,
    readme_with_quickstart,
    render_quickstart,
    render_results_page,
    write_results_page,
)

__all__ = ["PAGE_FILE", "QUICKSTART_BEGIN", "QUICKSTART_END", "SECTIONS", "readme_with_quickstart", "render_quickstart",
           "render_results_page", "write_results_page"]
