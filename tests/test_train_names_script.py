"""The script that trains the shipped names model (benchmarks/train_names_long.py).

The hour-long run is not repeated here: a few steps of a tiny model check that the script runs,
writes what it promises and, with ``--extra-years``, never trains on a validation or test name.
"""

import importlib.util
from pathlib import Path

import pytest

import tfscratch
from tfscratch.data import load_names, train_val_test_split

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "train_names_long.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("train_names_long", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_extra_names_are_never_validation_or_test_names(script):
    names = load_names()
    _, val_names, test_names = train_val_test_split(names, seed=0)
    extra = script.extra_training_names(names, range(2015, 2017), block_size=16)
    assert len(extra) > 5_000  # names of 2015-2016 that 2017 does not have
    assert not set(extra) & (set(val_names) | set(test_names))
    assert not set(extra) & set(names)
    assert extra == sorted(set(extra)) and all(len(name) < 16 for name in extra)


def test_a_few_steps_write_a_loadable_model(script, tmp_path):
    result = script.main(
        [
            *("--steps", "3", "--warmup", "1", "--evals", "1", "--d-model", "16"),
            *("--n-heads", "2", "--n-layers", "1", "--extra-years", "2016-2016"),
            *("--no-test", "--quiet", "--out", str(tmp_path), "--log-dir", str(tmp_path / "log")),
        ]
    )
    assert result["steps"] == 3 and result["test_loss"] is None
    model = tfscratch.load(tmp_path / "names_lm.npz")
    assert model.config["d_model"] == 16 and model.num_parameters() == result["parameters"]
    assert (tmp_path / "log" / "curve.csv").exists()
    assert "extra_years=range(2016, 2017)" in (tmp_path / "log" / "log.md").read_text()


@pytest.mark.parametrize("bad", ["2016", "abc-2016", "2016-2015", "-"])
def test_a_bad_year_range_is_refused_by_name(script, bad, capsys):
    with pytest.raises(SystemExit):
        script.parse_args(["--extra-years", bad])
    assert "--extra-years expects FIRST-LAST" in capsys.readouterr().err
