"""The fourth edition on the results page: goyal_v4 (``lab.results_page.goyal_v4``) rendered from
the committed ``answer.json`` and ``protocol.json`` of ``lbtrain scale``, its anchor superseding
goyal_v3's; keskar_v4 absent until its protocol has finished, then judged on two rows of its own,
each at its own batch (a synthetic study in ``tmp_path``, shaped as keskar_v3's committed files);
a regime that counts the update floor; and the page's modules without an import circle."""

import ast
import csv
import json
import shutil
from pathlib import Path

from helpers import REPO_ROOT
from lab.results_page import render_results_page
from lab.results_page.anchors import ANCHORS, GOYAL_LINEAR, KESKAR, anchor_row, regime_line, shown_anchors, superseded_by
from lab.results_page.common import REGIME_SLOT, listed
from lab.results_page.goyal_v4 import anchor_goyal_v4_linear, decisions_by_batch, section_goyal_v4, warmup_runs
from lab.results_page.keskar import KESKAR_V4_REGIMES, section_keskar_v4
from lbtrain.reports.regime import study_regimes
from lbtrain.reports.report import machine_minutes
from lbtrain.studies.scale.design import GRID_POINTS

RESULTS = Path(REPO_ROOT) / "results"


def _answer():
    return json.loads((RESULTS / "goyal_v4" / "answer.json").read_text())


def test_goyal_v4s_regime_counts_the_update_floor():
    """Batch 2,048 trains 800 updates (its floor; 6 epochs would be 156): the regime the page
    reads (lbtrain's reader) counts the floor, as the answer does."""
    answer = _answer()
    floors = {row["global_batch"]: row["updates"] for row in answer["per_world_size"]}
    assert {regime.global_batch: regime.updates for regime in study_regimes(RESULTS, "goyal_v4")} == floors
    assert floors[2048] == 800


def test_goyal_v4s_anchor_names_the_break_with_its_interval_and_the_exponent_and_supersedes_goyal_v3():
    answer = _answer()
    verdict, evidence = anchor_goyal_v4_linear(RESULTS)
    decisions = [(row["global_batch"], row["rules"]["linear"]) for row in answer["per_world_size"] if "linear" in row["rules"]]
    assert verdict == decisions_by_batch(decisions)
    worse = next(row["global_batch"] for row in answer["per_world_size"] if row["world_size"] == answer["first_worse"])
    held = next(row["global_batch"] for row in answer["per_world_size"] if row["world_size"] == answer["linear_rule_holds_up_to"])
    assert f"First batch where linear + warmup is worse: {worse:,}" in evidence
    assert f"the break lies above batch {held:,} and at most {worse:,}" in evidence
    fit = answer["lr_exponent"]["momentum+warmup"]
    assert f"^{fit['alpha']:.2f} (95% CI {fit['alpha_95_low']:.2f} to {fit['alpha_95_high']:.2f}" in evidence
    warmup, _ = warmup_runs(RESULTS)[worse]
    assert f" against {warmup:,} at batch {worse:,}; goyal_v4_warmup)" in evidence  # its half-epoch warmup is goyal_v4's

    goyal = {anchor.edition: anchor for anchor in ANCHORS if anchor.claim == GOYAL_LINEAR and anchor.paper == "Goyal et al. 2017"}
    assert superseded_by(RESULTS, goyal[3]) == ["goyal_v4"] and superseded_by(RESULTS, goyal[2]) == ["goyal_v3"]
    row = anchor_row(RESULTS, goyal[4])
    assert row[2] == "fourth" and row[4].startswith("goyal_v4: batch 2,048 = 3.79% of 53,984; 800 updates") and row[4].endswith("in regime")
    assert row[5].startswith(f"**{verdict}**: the claim holds at batch 128 to 256; the claim is inconclusive at batch 512; "
                             "the claim does not hold at batch 1,024 to 2,048")


def test_goyal_v4s_section_states_its_machine_time_sizing_and_the_warmup_question():
    text = "\n".join(section_goyal_v4(RESULTS))
    minutes = machine_minutes(RESULTS / "goyal_v4")
    assert f"{minutes['runs']:.0f} minutes of runs and {minutes['tuning_trials']:.0f} minutes of tuning trials" in text
    assert f"In all {(minutes['runs'] + minutes['tuning_trials']) / 60:.2f} machine hours" in text
    assert f"answer states {_answer()['machine_hours']:.2f}" in text
    assert "Sizing: Priced by lbtrain scale --dry-run" in text and REGIME_SLOT.format(study="goyal_v4") in text
    worse = next(row["global_batch"] for row in _answer()["per_world_size"] if row["world_size"] == _answer()["first_worse"])
    warmup, _ = warmup_runs(RESULTS)[worse]
    assert "**The batch or the warmup?** The warmup is half an epoch at every batch" in text and f"{warmup:,} at {worse:,}" in text
    assert "This study cannot tell the two apart; goyal_v4_warmup tests a longer warmup (next point)." in text
    assert "was not run: 0 of its 5 runs ended ok" in text  # the world-64 control of a rule whose every seed diverged
    assert "no ok seed (5 diverged): worse (0 of 5 runs ok against 5 of 5 (Fisher's exact test" in text
    assert "![test accuracy against the global batch" in text and "goyal_v4/figures/answer_accuracy.png" in text


def test_goyal_v4s_lars_bullet_states_each_batchs_best_lr_from_its_searches():
    """LARS's best base LR per world size (protocol.json's searches) scaled linearly from batch 32,
    as its runs trained it; a best on the grid's edge says so."""
    protocol = json.loads((RESULTS / "goyal_v4" / "protocol.json").read_text())
    text = "\n".join(section_goyal_v4(RESULTS))
    extended = []
    for name, entry in protocol["search"].items():
        if "-lars-" not in name:
            continue
        size = int(name.rsplit("-w", 1)[1])
        field = entry["fields"]["lr.base_lr"]
        edge = "" if field["interior"] else f" (on the edge of the {len(field['values'])} tried: the best may lie beyond)"
        assert f"{32 * size:,}: {field['best'] * size:.4g}{edge}" in text
        if len(field["values"]) > GRID_POINTS:
            extended.append((32 * size, len(field["values"])))
    assert "Tuned LR, lars+warmup: tuned lr ~ global_batch^" in text and "found no ok tuning trial" not in text
    # Extended only where the search tried more values than the design's grid, said from the searches.
    lars = next(line for line in text.splitlines() if line.startswith("- LARS with warmup, tuned on its own grid"))
    assert ("extended past an edge" in lars) == bool(extended) and "below a grid" not in lars
    if extended:
        assert (f"(its grid extended past an edge at batch {listed([f'{batch:,}' for batch, _ in extended])}: "
                f"{listed([str(tried) for _, tried in extended])} values tried against the design's {GRID_POINTS})") in lars


WARMUP = RESULTS / "goyal_v4_warmup"


def _updates(run):
    """A run's warmup and planned updates from its metrics.json."""
    training = run["config"]["training"]
    planned = max(training.get("min_steps") or 0, (training.get("epochs") or 0) * run["steps_per_epoch"])
    return round(run["config"]["lr"]["warmup_epochs"] * run["steps_per_epoch"]), planned


def _warmup_cells(folder=WARMUP):
    """goyal_v4_warmup read here from its summary and runs: per arm (shorter warmup first) its
    label and per batch the warmup's and the planned updates, the runs and the ok ones; world size
    1's ok runs, runs and warmup share of its updates in percent."""
    rows = list(csv.DictReader((folder / "summary.csv").open()))
    cells = {}
    for row in rows:
        if row["world_size"] == "1":
            continue
        warmup, planned = _updates(json.loads((folder / "runs" / row["run_id"] / "metrics.json").read_text()))
        arm, batch = row["label"].rsplit(" b", 1)
        cell = cells.setdefault(arm, {}).setdefault(int(batch), {"warmup": warmup, "updates": planned, "runs": 0, "ok": 0})
        cell["runs"] += 1
        cell["ok"] += row["status"] == "ok"
    reference = [row for row in rows if row["world_size"] == "1"]
    warmup, planned = _updates(json.loads((folder / "runs" / reference[0]["run_id"] / "metrics.json").read_text()))
    arms = sorted(cells.items(), key=lambda item: sum(cell["warmup"] for cell in item[1].values()))
    return arms, (sum(row["status"] == "ok" for row in reference), len(reference), 100 * warmup / planned)


def _first_worse():
    answer = _answer()
    return next(row["global_batch"] for row in answer["per_world_size"] if row["world_size"] == answer["first_worse"])


def test_goyal_v4_warmup_answers_the_warmup_question_from_its_runs():
    """goyal_v4_warmup: per batch, how many of each warmup's runs ended ok (summary.csv) and
    Fisher's exact test on the longer warmup; the bullet and the anchor say what that test gives,
    and where the longer warmup still ends ok less often than world size 1 (the break kept)."""
    from lab.results_page.goyal_v4 import warmup_study_text
    from lbtrain.reports.decisions import trained_share_claim

    ((_, short), (_, long)), (reference_ok, reference_runs, share) = _warmup_cells()
    text = warmup_study_text(RESULTS)
    verdicts = {}
    for batch in long:
        verdicts[batch] = trained_share_claim(long[batch]["ok"], long[batch]["runs"], short[batch]["ok"], short[batch]["runs"])
        assert (f"batch {batch:,} ({short[batch]['warmup']:,} against {long[batch]['warmup']:,} warmup updates of "
                f"{long[batch]['updates']:,}): {short[batch]['ok']} of {short[batch]['runs']} against {long[batch]['ok']} of "
                f"{long[batch]['runs']}, {verdicts[batch][0]}") in text
    assert f"world size 1's warmup share ({share:.1f}% of the updates)" in text
    runs = {cell["runs"] for cells in (short, long) for cell in cells.values()}
    rescued = [batch for batch, (verdict, _) in verdicts.items() if verdict == "better"]
    kept = [batch for batch in long if trained_share_claim(long[batch]["ok"], long[batch]["runs"], reference_ok, reference_runs)[0] == "worse"]
    if not rescued and len(runs) == 1:
        assert f"With world size 1's warmup share no batch is measurably rescued (Fisher's exact test, {runs.pop()} runs each)" in text
    assert ("a longer warmup of this size does not remove the break" in text) == (bool(kept) and not rescued)
    for batch in kept:
        assert f"{long[batch]['ok']} of {long[batch]['runs']} at {batch:,}" in text.split("than world size 1's (")[1]
    assert "the LR the linear rule reaches" not in text and "not the warmup's length" not in text  # the study varies the warmup only
    assert "**The batch or the warmup? Answered by goyal_v4_warmup**" in "\n".join(section_goyal_v4(RESULTS))

    worse = _first_worse()
    verdict, counts = verdicts[worse]
    says = {"better": "rescues it", "worse": "ends ok less often"}.get(verdict, "does not measurably rescue it")
    _, evidence = anchor_goyal_v4_linear(RESULTS)
    assert evidence.endswith(f"; a longer warmup ({long[worse]['warmup']:,} updates against {short[worse]['warmup']:,} at batch "
                             f"{worse:,}; goyal_v4_warmup) {says}: {counts}: {verdict}")


def _copy_warmup(results: Path) -> Path:
    shutil.copytree(RESULTS / "goyal_v4", results / "goyal_v4", ignore=shutil.ignore_patterns("figures"))
    return Path(shutil.copytree(WARMUP, results / "goyal_v4_warmup", ignore=shutil.ignore_patterns("figures", "history.csv", "config.yaml")))


def _rewrite_summary(folder: Path, change) -> None:
    rows = list(csv.DictReader((folder / "summary.csv").open()))
    with (folder / "summary.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows([change(row) for row in rows])


def test_a_longer_warmup_that_rescues_a_batch_is_said_to_and_an_unfinished_study_is_not_read(tmp_path):
    from lab.results_page.goyal_v4 import warmup_comparison, warmup_study_text, warmup_text

    folder = _copy_warmup(tmp_path)
    worse = _first_worse()
    # Every run of the longer warmup at the first batch where linear + warmup is worse ends ok.
    (_, (longer, long)), _ = _warmup_cells(folder)
    _rewrite_summary(folder, lambda row: {**row, "status": "ok"} if row["label"] == f"{longer} b{worse}" else row)
    assert warmup_comparison(tmp_path).claims[worse][0] == "better"
    assert f"The longer warmup measurably rescues batch {worse:,} (Fisher's exact test" in warmup_study_text(tmp_path)
    _, evidence = anchor_goyal_v4_linear(tmp_path)
    assert f"at batch {worse:,}; goyal_v4_warmup) rescues it: {long[worse]['runs']} of {long[worse]['runs']} runs ok against " in evidence

    # Not finished (no report.json, lbtrain report's output, written last): nothing of it is read; the question stays open.
    (folder / "report.json").unlink()
    assert warmup_comparison(tmp_path) is None and warmup_study_text(tmp_path) == ""
    assert "**Open question: the batch or the warmup?**" in warmup_text(tmp_path, _answer())
    _, evidence = anchor_goyal_v4_linear(tmp_path)
    assert "goyal_v4_warmup" not in evidence and "; open: its warmup is half an epoch" in evidence


def test_warmup_arms_that_share_no_batch_or_lost_their_metrics_are_not_compared(tmp_path):
    from lab.results_page.goyal_v4 import warmup_arms, warmup_comparison, warmup_runs

    folder = _copy_warmup(tmp_path)
    ((shorter, _), _), _ = _warmup_cells(folder)
    # A run without its metrics.json: its cell still counts it, its warmup is read from another run.
    first = next(row for row in csv.DictReader((folder / "summary.csv").open()) if row["world_size"] != "1")
    shutil.rmtree(folder / "runs" / first["run_id"])
    cell = warmup_arms(tmp_path)[first["label"].rsplit(" b", 1)[0]][int(first["global_batch"])]
    assert cell["warmup"] is not None
    assert cell["runs"] == sum(row["label"] == first["label"] for row in csv.DictReader((folder / "summary.csv").open()))
    # goyal_v4's linear rule with one run's metrics.json gone: the others are read.
    linear = [row for row in csv.DictReader((tmp_path / "goyal_v4" / "summary.csv").open()) if row["label"] == "momentum+warmup linear rule"]
    shutil.rmtree(tmp_path / "goyal_v4" / "runs" / linear[0]["run_id"])
    assert set(warmup_runs(tmp_path)) == {int(row["global_batch"]) for row in linear}
    # No batch in common: no comparison.
    _rewrite_summary(folder, lambda row: {**row, "global_batch": str(int(row["global_batch"]) + 1)}
                     if row["label"].startswith(f"{shorter} b") else row)
    assert warmup_comparison(tmp_path) is None


# keskar_v4, synthetic: the shapes of keskar_v3's committed summary.csv and metrics.json --------


def _template():
    header = (RESULTS / "keskar_v3" / "summary.csv").read_text().splitlines()[0].split(",")
    run = next((RESULTS / "keskar_v3" / "runs").glob("*/metrics.json"))
    return header, json.loads(run.read_text())


TRAIN = 54_000
PER_WORKER = 128


def write_keskar_v4(folder, longer_loss, finished=True):
    """keskar_v4 as its sweep would write it: ``momentum tuned`` at world sizes 1, 8 and 42 (batch
    128, 1,024, 5,376; 20 epochs), ``momentum tuned 2x longer`` at 8 and ``4x longer`` at 42, five
    seeds each, every run annealed (LR at its end 1e-6 of its peak); ``protocol.json`` only when
    ``finished``. The large batch tests 3 points worse at 5,376, level at 1,024; its eigenvalues
    sit above the small batch's."""
    header, template = _template()
    folder.mkdir(parents=True)
    rows = []
    arms = [(1, 1, 0.89, 0.20, 20.0), (8, 1, 0.888, 0.24, 30.0), (8, 2, 0.889, longer_loss, 31.0),
            (42, 1, 0.85, 0.40, 60.0), (42, 4, 0.86, 0.30, 61.0)]
    for world, factor, test, loss, eigenvalue in arms:
        batch = world * PER_WORKER
        label = "momentum tuned" + ("" if factor == 1 else f" {factor}x longer")
        per_epoch = TRAIN // batch
        for seed in range(1, 6):
            wobble = 0.001 * (seed - 3)
            run_id = f"{label.replace(' ', '-')}-w{world}-s{seed}-abc{world}{factor}"
            peak = 0.1 * (batch / 128) ** 0.5
            steps = factor * 20 * per_epoch
            metrics = {**template, "config": {**template["config"], "optimizer": {"name": "momentum", "params": {"momentum": 0.9}}},
                       "status": "ok", "world_size": world, "global_batch": batch, "learning_rate": peak, "steps_per_epoch": per_epoch,
                       "total_steps": steps, "budget": {"epochs": 20} if factor == 1 else {"steps": steps},
                       "history": [{**template["history"][-1], "epoch": 20 * factor, "lr": 1e-6 * peak}],
                       "metrics": {**template["metrics"], "train_loss": loss, "test_accuracy": test + wobble,
                                   "hessian_top_eigenvalue": eigenvalue + seed, "sharpness": eigenvalue / 4}}
            (folder / "runs" / run_id).mkdir(parents=True)
            (folder / "runs" / run_id / "metrics.json").write_text(json.dumps(metrics))
            rows.append({**dict.fromkeys(header, ""), "run_id": run_id, "label": label, "status": "ok", "world_size": world,
                         "per_worker_batch": PER_WORKER, "global_batch": batch, "seed": seed, "learning_rate": peak,
                         "test_accuracy": test + wobble, "train_loss": loss, "sharpness": eigenvalue / 4, "total_steps": steps})
    with open(folder / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, header)
        writer.writeheader()
        writer.writerows(rows)
    if finished:
        (folder / "protocol.json").write_text(json.dumps({"rows": [], "trials": {}, "lr_fits": {}, "equal_steps": [], "train_longer": [],
                                                          "best_arms": {}, "search": {}, "seeds": {"tuning": [0, 100], "finals": [1, 2, 3, 4, 5]}}))


def test_keskar_v4_is_absent_from_the_page_until_its_protocol_has_finished(tmp_path):
    write_keskar_v4(tmp_path / "keskar_v4", longer_loss=0.19, finished=False)
    page = render_results_page(tmp_path)
    assert "keskar_v4" not in page
    assert not [anchor for anchor in shown_anchors(tmp_path) if anchor.edition == 4]
    assert "## keskar_v4:" in render_results_page(RESULTS)  # committed finished: on the page


def test_keskar_v4_is_judged_on_a_row_per_regime_each_at_its_own_batch(tmp_path):
    write_keskar_v4(tmp_path / "keskar_v4", longer_loss=0.19)
    rows = {anchor.row: anchor_row(tmp_path, anchor) for anchor in ANCHORS if anchor.claim == KESKAR and anchor.edition == 4}
    assert set(rows) == set(KESKAR_V4_REGIMES)
    assert rows["in regime"][4].startswith("keskar_v4, in regime: batch 1,024 = 1.9% of 53,888; 1,040 updates (20 epochs); in regime")
    assert rows["Keskar's regime"][4].startswith("keskar_v4, Keskar's regime: batch 5,376 = 9.98% of 53,888; 200 updates (20 epochs); "
                                                 "in regime (9.98% of the data <= 10%; 200 updates >= 200)")
    # At 1,024 the 2x horizon reached the small batch's loss (0.19 <= 0.20) and tests level: matches, and sharper.
    assert rows["in regime"][5].startswith("**matches**: the claim holds in part: sharper, tests within the 1-point margin at equal "
                                           "training loss; ")
    assert "2x longer, annealed = equal training loss" in rows["in regime"][6]
    # At 5,376 no horizon reached it (0.30 > 0.20): judged at equal epochs, said so; worse and sharper.
    assert rows["Keskar's regime"][5] == "**worse**: the claim holds: sharper, tests worse at equal epochs"
    assert "at equal epochs: no annealed horizon (1x, 4x) reached the small batch's mean train loss 0.200" in rows["Keskar's regime"][6]
    keskar_v3 = next(anchor for anchor in ANCHORS if anchor.claim == KESKAR and anchor.edition == 3)
    assert superseded_by(tmp_path, keskar_v3) == ["keskar_v4"]

    assert regime_line(tmp_path, "keskar_v4")[0] == (
        "*Regime*, each row at its own large batch: in regime, batch 1,024 = 1.9% of 53,888; 1,040 updates (20 epochs): **in regime** "
        "for Keskar et al. 2017; Keskar's regime, batch 5,376 = 9.98% of 53,888; 200 updates (20 epochs): **in regime** for Keskar "
        "et al. 2017.")
    page = render_results_page(tmp_path)
    section = page.split("## keskar_v4:")[1].split("\n## ")[0]
    assert "*Regime*, each row at its own large batch" in section and "<!--" not in page
    # Flatness at matched LR: each run's LR at its end and 2 (1 + m) / LR beside its eigenvalue.
    assert "| limit 2 (1 + m) / LR | λ / limit |" in section
    assert "| momentum tuned 4x longer | 5376 | 1 | 800 | 6.48e-07 (0% of 0.648) | 62 | 5.86e+06 | 0.00 |" in section
    assert "| in regime: 2x longer, annealed = equal training loss | 1024 |" in section
    assert "| Keskar's regime: 4x longer, annealed | 5376 |" in section  # 0.30 > 0.20: not called equal loss


def test_the_equal_loss_arm_is_named_only_when_its_loss_is_at_most_the_small_batchs(tmp_path):
    write_keskar_v4(tmp_path / "keskar_v4", longer_loss=0.21)
    text = "\n".join(section_keskar_v4(tmp_path))
    assert "equal training loss |" not in text and "| in regime: 2x longer, annealed | 1024 |" in text


def test_the_results_page_modules_import_no_circle():
    """No module of lab/results_page imports, at its top or inside a function, one that imports it
    back (issue 54: common imported the anchors inside regime_line)."""
    folder = Path(REPO_ROOT) / "lab" / "results_page"
    imports = {}
    for path in folder.glob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lab.results_page."):
                names.add(node.module.rsplit(".", 1)[1])
            elif isinstance(node, ast.Import):
                names |= {alias.name.rsplit(".", 1)[1] for alias in node.names if alias.name.startswith("lab.results_page.")}
        imports[path.stem] = names

    def reaches(start, goal, seen=()):
        return any(name == goal or (name not in seen and reaches(name, goal, (*seen, name))) for name in imports.get(start, ()))

    assert imports["common"] == set()
    assert not [module for module in imports if module != "__init__" and reaches(module, module)]
