"""The nightly verdict end to end: generate two runs, score one against the other."""

import pytest

from litmus_score import synthetic
from pipeline.cli import main
from tests.conftest import RUNNER, load_json

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

AGENT = synthetic.AGENTS[3]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Scored runs: last night, tonight (same distribution), tonight with a planted rise."""
    root = tmp_path_factory.mktemp("nightly")
    shards = {
        "last": synthetic.generate(str(root / "last"), 6000, 2, seed=21),
        "same": synthetic.generate(str(root / "same"), 6000, 2, seed=22),
        "worse": synthetic.generate(str(root / "worse"), 6000, 2, seed=22, misuse_factor={AGENT: 2.0}),
    }
    outputs = {}
    for name in shards:
        outputs[name] = root / f"out-{name}"
        assert main(["score", "--input", str(root / name / "*.parquet"), "--output", str(outputs[name]), *RUNNER]) == 0
    return outputs


def test_planted_rise_flags_that_agent_alone_and_exits_3(runs, tmp_path):
    code = main(["compare", str(runs["worse"]), str(runs["last"]), "--output", str(tmp_path / "cmp")])
    assert code == 3
    comparison = load_json(tmp_path / "cmp" / "comparison.json")
    assert comparison["regressions"] == [AGENT]
    flagged = next(a for a in comparison["agents"] if a["agent"] == AGENT)
    assert flagged["verdict"] == "regression" and flagged["ci95"][0] > 0
    assert (tmp_path / "cmp" / "report.html").read_text().count(AGENT) > 0


def test_unchanged_distribution_exits_0(runs, tmp_path):
    assert main(["compare", str(runs["same"]), str(runs["last"]), "--output", str(tmp_path / "cmp")]) == 0
    assert load_json(tmp_path / "cmp" / "comparison.json")["regressions"] == []


def test_baseline_flag_compares_as_part_of_the_run(runs, tmp_path):
    shards = synthetic.generate(str(tmp_path / "again"), 6000, 2, seed=22, misuse_factor={AGENT: 2.0})
    assert shards
    code = main(["score", "--input", str(tmp_path / "again" / "*.parquet"), "--output", str(tmp_path / "out"),
                 "--baseline", str(runs["last"]), *RUNNER])
    assert code == 3
    assert load_json(tmp_path / "out" / "comparison.json")["regressions"] == [AGENT]


def test_thresholds_file_changes_the_verdict(runs, tmp_path):
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text("schema: litmus-thresholds/1\nmin_scored_trajectories: 50\n"
                       "misuse_rate:\n  absolute_increase: 0.9\n  require_significance: true\n")
    assert main(["compare", str(runs["worse"]), str(runs["last"]), "--thresholds", str(lenient),
                 "--output", str(tmp_path / "cmp")]) == 0


def test_a_baseline_of_another_mode_is_rescored_in_this_runs(runs, tmp_path, capsys):
    code = main(["score", "--input", str(runs["last"].parent / "last" / "*.parquet"), "--output",
                 str(tmp_path / "o"), "--adjudication", "strict", "--baseline", str(runs["last"]), *RUNNER])
    # The same inputs, scored again in strict mode: the same rates, no regression (was: exit 5, no verdict).
    assert code == 0
    assert "re-scored under this run's rules" in capsys.readouterr().out
    comparison = load_json(tmp_path / "o" / "comparison.json")
    assert comparison["rules_changed"] == [] and comparison["baseline"]["rescored"]["scored_under"]["adjudication"] \
        == "commit"
    assert all(agent["new"] == agent["old"] for agent in comparison["agents"])


def test_a_rescored_baseline_brings_its_own_drivers(runs, tmp_path, capsys):
    """Tonight strict against a baseline scored commit: the drivers' baseline figures are those of its
    inputs scored strict, as a strict run of them writes its slices."""
    last_inputs = str(runs["last"].parent / "last" / "*.parquet")
    assert main(["score", "--input", last_inputs, "--output", str(tmp_path / "last-strict"),
                 "--adjudication", "strict", *RUNNER]) == 0
    code = main(["score", "--input", str(runs["worse"].parent / "worse" / "*.parquet"), "--output",
                 str(tmp_path / "o"), "--adjudication", "strict", "--baseline", str(runs["last"]), *RUNNER])
    assert code == 3
    out = capsys.readouterr().out
    assert "re-scored under this run's rules" in out and "    by tool (misuse calls, baseline -> this run" in out
    comparison = load_json(tmp_path / "o" / "comparison.json")
    assert comparison["baseline"]["rescored"] and comparison["regressions"] == [AGENT]
    (entry,) = [agent for agent in comparison["agents"] if agent["agent"] == AGENT]
    strict = load_json(tmp_path / "last-strict" / "metrics.json")
    for dimension, unit in (("tool", "calls"), ("task_category", "trajectories")):
        pooled: dict = {}
        for group in strict["groups"]:
            if group["agent"] == AGENT:
                for name, counts in group["slices"][dimension].items():
                    before = pooled.get(name, (0, 0))
                    pooled[name] = (before[0] + counts[unit], before[1] + counts["misuse"]["count"])
        listed = [driver for driver in entry["drivers"][dimension] if not driver.get("folded")]
        assert listed and {driver["name"]: (driver["old"][unit], driver["old"]["misuse"]) for driver in listed} \
            == {name: pooled[name] for name in (driver["name"] for driver in listed)}
    assert "What drove it" in (tmp_path / "o" / "report.html").read_text()
