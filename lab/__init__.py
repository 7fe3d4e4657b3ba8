"""This repository's own studies: the lab notebook beside the library, not part of it.

lbtrain (the installed package) serves a user's own experiments; ``lab`` holds what is about the
studies committed under ``results/``: the results page (``results_page``), the validation of the
advisor against those studies (``advisor_validation``), the advisor's fallback evidence rendered
from them into ``lbtrain/studies/findings.json`` (``findings``), the README's performance table
(``performance``), the elasticity study's section (``elasticity``) and one-off data migrations of
committed results (``migrations``). It imports lbtrain only through its public API (a module of the
API reference, a name its ``__all__`` lists where it has one; ``tests/lab/test_lab_boundary.py``
checks it), and is not in the wheel (``pyproject.toml`` packages ``lbtrain*`` only).

Run from the repository root: ``python scripts/render_results_readme.py [--write]``,
``python scripts/validate_advisor.py``, ``python scripts/render_benchmarks.py [--write]``,
``python -m lab.elasticity [results/elasticity]``, ``python -m lab.findings [results]``.
"""
