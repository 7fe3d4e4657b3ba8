"""``lbtrain sweep`` refuses, in one line and before any trial trains, an existing Optuna study of
the same name made for another direction or objective (issue #53, item 5); a study of its own,
also one made before lbtrain recorded its objective, is topped up as before."""

import optuna
import pytest

from helpers import sweep_spec, write_spec
from lbtrain.cli import main
from lbtrain.config import ExperimentConfig
from lbtrain.studies.sweep import OBJECTIVE, open_study, storage_url


def existing_study(tmp_path, direction="maximize", objective=None):
    """The experiment, after another program made ``tiny-w1`` in its storage with ``direction``
    (and the user attribute ``objective`` if given), holding one finished trial."""
    experiment = ExperimentConfig.model_validate(sweep_spec(tmp_path, grid={"world_sizes": [1]}))
    experiment.results_dir.mkdir(parents=True)
    study = optuna.create_study(study_name="tiny-w1", storage=storage_url(experiment), direction=direction)
    if objective is not None:
        study.set_user_attr("objective", objective)
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.25))
    return experiment


@pytest.mark.parametrize(("direction", "objective", "described"), [
    ("minimize", None, f"direction minimize and objective {OBJECTIVE!r}"),
    ("maximize", "validation_loss", "direction maximize and objective 'validation_loss'"),
])
def test_a_sweep_refuses_an_existing_study_with_another_direction_or_objective(tmp_path, capsys, direction, objective,
                                                                                described):
    experiment = existing_study(tmp_path, direction, objective)
    path = write_spec(tmp_path, sweep_spec(tmp_path, grid={"world_sizes": [1]}))
    assert main(["sweep", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"lbtrain: error: Optuna study 'tiny-w1' exists in the sweep's storage with {described}; lbtrain's sweep maximizes "
        f"{OBJECTIVE!r}: rename the experiment, set sweep.storage, or delete that study\n")
    # Nothing trained: the study holds the one trial it had.
    assert len(optuna.load_study(study_name="tiny-w1", storage=storage_url(experiment)).trials) == 1


def test_a_study_of_its_own_made_before_the_objective_was_recorded_is_taken_and_marked(tmp_path):
    experiment = existing_study(tmp_path)
    study = open_study(experiment, 1)
    assert study.user_attrs["objective"] == OBJECTIVE
    assert [trial.value for trial in study.trials] == [0.25]
    assert open_study(experiment, 1).user_attrs == {"objective": OBJECTIVE}
