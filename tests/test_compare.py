"""Run comparison: Newcombe and McNemar against known values, threshold semantics, thresholds files."""

import json
import math
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from litmus_score.exits import Exit
from litmus_score.scoring import metrics as m
from litmus_score.scoring.compare import (
    DEFAULT_THRESHOLDS,
    ThresholdsError,
    baseline_source,
    compare_metrics,
    load_thresholds,
    mcnemar,
    newcombe_interval,
    rise_p_value,
)
from litmus_score.scoring.stats import at_least_once_over_tasks, wilson_interval
from pipeline import job

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = Path(os.environ.get(
    "LITMUS_CONFORMANCE", Path(__file__).resolve().parents[2] / "shared" / "spec" / "conformance"))


# Newcombe 1998, Table II, method 10. The brief for this module gave
# .0575 to .8316 for (c) and shifted (g) and (h) by one row; the published
# values below are also what the formula gives from Table I's Wilson limits.
@pytest.mark.parametrize(
    "x1, n1, x2, n2, difference, low, high",
    [
        (56, 70, 48, 80, 0.2000, 0.0524, 0.3339),
        (9, 10, 3, 10, 0.6000, 0.1705, 0.8090),
        (6, 7, 2, 7, 0.5714, 0.0582, 0.8062),
        (5, 56, 0, 29, 0.0893, -0.0381, 0.1926),
        (0, 10, 0, 20, 0.0, -0.1611, 0.2775),
        (0, 10, 0, 10, 0.0, -0.2775, 0.2775),
        (10, 10, 0, 20, 1.0, 0.6791, 1.0),
        (10, 10, 0, 10, 1.0, 0.6075, 1.0),
    ],
)
def test_newcombe_published_values(x1, n1, x2, n2, difference, low, high):
    assert x1 / n1 - x2 / n2 == pytest.approx(difference, abs=5e-5)
    assert newcombe_interval(x1, n1, x2, n2) == pytest.approx([low, high], abs=5e-4)


def test_newcombe_needs_both_samples():
    assert newcombe_interval(0, 0, 3, 10) is None
    assert newcombe_interval(3, 10, 0, 0) is None
    with pytest.raises(ValueError):
        newcombe_interval(11, 10, 3, 10)


def test_newcombe_wider_at_higher_confidence():
    narrow = newcombe_interval(56, 70, 48, 80, z=1.0)
    wide = newcombe_interval(56, 70, 48, 80)
    assert wide[0] < narrow[0] < 0.2 < narrow[1] < wide[1]


@given(st.integers(1, 300).flatmap(lambda n1: st.tuples(st.integers(0, n1), st.just(n1))),
       st.integers(1, 300).flatmap(lambda n2: st.tuples(st.integers(0, n2), st.just(n2))))
def test_newcombe_contains_the_difference_and_is_antisymmetric(first, second):
    (x1, n1), (x2, n2) = first, second
    low, high = newcombe_interval(x1, n1, x2, n2)
    assert -1 <= low <= x1 / n1 - x2 / n2 <= high <= 1
    swapped = newcombe_interval(x2, n2, x1, n1)
    assert swapped == pytest.approx([-high, -low], abs=1e-12)


@pytest.mark.parametrize(
    "b, c, p_value",
    [
        (7, 1, 2 * (1 + 8) / 2**8),  # 0.0703125
        (0, 5, 2 / 2**5),  # 0.0625
        (2, 10, 2 * (1 + 12 + 66) / 2**12),  # 0.0386
        (1, 0, 1.0),
        (3, 3, 1.0),  # twice the tail is above 1: capped
        (0, 0, 1.0),
    ],
)
def test_mcnemar_exact(b, c, p_value):
    assert mcnemar(b, c) == {"discordant_new_only": b, "discordant_old_only": c, "p_value": p_value}
    assert mcnemar(c, b)["p_value"] == p_value


def test_mcnemar_large_counts_match_the_normal_approximation():
    z = (1100 - 1000 - 1) / math.sqrt(2100)  # continuity-corrected
    assert mcnemar(1000, 1100)["p_value"] == pytest.approx(math.erfc(z / math.sqrt(2)), rel=0.05)


def test_mcnemar_refuses_negative_counts():
    with pytest.raises(ValueError):
        mcnemar(-1, 3)


# --- metrics.json documents in the scoring-v1 shape -------------------------

def _rate(count, trials):
    return {"count": count, "rate": count / trials if trials else None, "ci95": wilson_interval(count, trials)}


def group(run_id, agent, tasks=None, *, misuse=None, scored=None):
    """One group. `tasks` maps task_id to per-trajectory misuse outcomes and
    gives the counts and slices.task; or give `misuse` and `scored` alone
    (then no slices, as before slices were added)."""
    document = {"run_id": run_id, "agent": agent}
    if tasks is not None:
        scored = sum(len(outcomes) for outcomes in tasks.values())
        misuse = sum(sum(outcomes) for outcomes in tasks.values())
        document["slices"] = {"task": {
            task_id: {"trajectories": len(outcomes), "misuse": sum(outcomes), "legacy_misuse": sum(outcomes)}
            for task_id, outcomes in tasks.items()
        }}
    document.update({
        "trajectories": {"input": scored, "scored": scored, "unscored": 0, "unscored_by_reason": {}},
        "calls": {"input": scored, "scored": scored, "by_category": {}},
        "misuse": _rate(misuse, scored),
        "legacy_misuse": _rate(misuse, scored),
        "over_penalized": 0,
        "under_penalized": 0,
        "execution_hallucination": {"refused": 0, "count": 0, "rate": None},
    })
    return document


def metrics(*groups, mode="commit"):
    return {"schema": "litmus-metrics/1", "adjudication": mode, "groups": list(groups), "totals": {}}


def counts(mode="commit", **agents):
    """A document with one group per agent from (misuse, scored), no slices."""
    return metrics(*(group("run", agent, misuse=m, scored=n) for agent, (m, n) in agents.items()), mode=mode)


def thresholds(absolute=None, relative=None, minimum=50, level=0.05):
    return {
        "schema": "litmus-thresholds/1",
        "min_scored_trajectories": minimum,
        "misuse_rate": {"absolute_increase": absolute, "relative_increase": relative,
                        "require_significance": True},
        "false_alarm_level": level,
    }


def verdict(new, old, **bounds):
    (entry,) = compare_metrics(counts(a=new), counts(a=old), thresholds(**bounds))["agents"]
    return entry["verdict"]


def tasks(rule, n_tasks=40, repeats=5):
    """task_id -> outcomes, misuse where rule(task, repeat); plus trajectories without a task."""
    outcomes = {f"t{task:02d}": [rule(task, r) for r in range(repeats)] for task in range(n_tasks)}
    outcomes["(none)"] = [False, False]
    return outcomes


BASE = lambda task, r: (task * 5 + r) % 20 == 0  # noqa: E731  10 of 202 trajectories, on 10 tasks
RAISED = lambda task, r: r == 0  # noqa: E731  40 of 202, on every task


def test_planted_rise_flags_that_agent_alone():
    # The old document holds two nightlies per agent: they are pooled.
    old = metrics(*(group(run, agent, {k: v for k, v in tasks(BASE).items() if (k < "t20") == (run == "n1")})
                    for agent in ("alpha", "beta", "gamma") for run in ("n1", "n2")))
    new = metrics(group("n3", "alpha", tasks(BASE)), group("n3", "beta", tasks(RAISED)),
                  group("n3", "gamma", tasks(BASE)))
    result = compare_metrics(new, old)
    assert result["regressions"] == ["beta"] and result["exit_code"] == Exit.REGRESSION == 3
    alpha, beta, gamma = result["agents"]
    assert [alpha["verdict"], beta["verdict"], gamma["verdict"]] == ["ok", "regression", "ok"]
    assert beta["new"] == {"scored": 202, "misuse": 40, "rate": 40 / 202}
    assert beta["old"] == {"scored": 202, "misuse": 10, "rate": 10 / 202}
    assert beta["difference"] == pytest.approx(30 / 202)
    assert beta["ci95"] == newcombe_interval(40, 202, 10, 202) and beta["ci95"][0] > 0
    assert beta["paired_tasks"] == {"tasks": 40, **mcnemar(30, 0)}
    assert alpha["paired_tasks"] == {"tasks": 40, "discordant_new_only": 0, "discordant_old_only": 0, "p_value": 1.0}
    assert alpha["difference"] == 0.0
    assert any("absolute bound" in reason for reason in beta["reasons"])
    assert result["thresholds"] == DEFAULT_THRESHOLDS.model_dump(mode="json", by_alias=True)
    assert result["schema"] == "litmus-comparison/1" and result["adjudication"] == "commit"
    # Deterministic and serializable as it stands.
    assert json.dumps(result, sort_keys=True) == json.dumps(compare_metrics(new, old), sort_keys=True)


def test_the_document_names_its_baseline_and_the_rules_that_changed():
    old = {**counts(a=(1, 100)), "policy_sha256": "aa" * 32}
    new = {**counts(a=(1, 100)), "policy_sha256": "bb" * 32}
    old["groups"].append(group("n0", "a", misuse=1, scored=100))
    result = compare_metrics(new, old, source=baseline_source("scores/date=2026-11-30", {"night": {
        "date": "2026-11-30", "inputs": ["runs/2026-11-30/*.parquet"]}}))
    assert result["baseline"] == {"folder": "scores/date=2026-11-30", "night": "2026-11-30", "runs": ["n0", "run"],
                                  "spec": "litmus-metrics/1", "adjudication": "commit", "policy_sha256": "aa" * 32}
    assert result["rules_changed"] == [{"rule": "policy_sha256", "new": "bb" * 32, "old": "aa" * 32}]
    # Without a source (two documents in memory) the baseline is named by its runs and rules alone.
    unnamed = compare_metrics(old, old)
    assert unnamed["baseline"]["folder"] is None and unnamed["baseline"]["night"] is None
    assert unnamed["rules_changed"] == []
    assert baseline_source("out/manual", {})["night"] is None


def test_unchanged_runs_exit_zero():
    document = metrics(*(group("n1", agent, tasks(BASE)) for agent in ("alpha", "beta", "gamma")))
    result = compare_metrics(document, document)
    assert result["exit_code"] == 0 and result["regressions"] == []
    assert {entry["verdict"] for entry in result["agents"]} == {"ok"}


def test_absolute_bound():
    assert verdict((45, 1000), (20, 1000), absolute=0.02) == "regression"
    assert verdict((45, 1000), (20, 1000), absolute=0.03) == "ok"


def test_a_rise_equal_to_the_bound_does_not_exceed_it():
    # 0.32 - 0.30 is 0.020000000000000018 in floats. Past the bound, a rise too small to confirm is watched.
    assert verdict((32, 100), (30, 100), absolute=0.02) == "ok"
    assert verdict((33, 100), (30, 100), absolute=0.02) == "watch"


def test_relative_bound():
    # 4% -> 5.5%: below the absolute bound, above a quarter of the old rate.
    assert verdict((550, 10000), (400, 10000), relative=0.25) == "regression"
    assert verdict((550, 10000), (400, 10000), absolute=0.02) == "ok"
    assert verdict((550, 10000), (400, 10000), absolute=0.02, relative=0.25) == "regression"
    assert verdict((550, 10000), (400, 10000), relative=0.5) == "ok"


def test_from_zero_any_rise_exceeds_a_relative_bound():
    assert verdict((1, 100), (0, 100), relative=0.25) == "watch"  # past the bound, not significant
    assert verdict((0, 100), (0, 100), relative=0.25) == "ok"


def test_significance_requirement():
    # A rise of 1.5 points on 1000 each: past the relative bound, interval reaches 0.
    assert newcombe_interval(55, 1000, 40, 1000)[0] < 0
    assert verdict((55, 1000), (40, 1000), relative=0.25) == "watch"
    assert rise_p_value(55, 1000, 40, 1000) < 0.1
    assert verdict((55, 1000), (40, 1000), relative=0.25, level=0.1) == "regression"


def test_a_fall_is_never_a_regression():
    assert verdict((10, 1000), (400, 1000), absolute=0.0, relative=0.0, level=0.5) == "ok"


def test_minimum_sample_size():
    assert verdict((40, 49), (0, 1000), absolute=0.02) == "insufficient_data"
    assert verdict((0, 1000), (0, 49), absolute=0.02) == "insufficient_data"
    assert verdict((40, 50), (0, 50), absolute=0.02) == "regression"
    (entry,) = compare_metrics(counts(a=(40, 49)), counts(a=(0, 1000)), thresholds(absolute=0.02))["agents"]
    assert entry["ci95"] is not None and any("fewer than 50" in reason for reason in entry["reasons"])


def test_agents_in_one_run_only():
    result = compare_metrics(counts(a=(5, 100), new=(90, 100)), counts(a=(5, 100), gone=(0, 100)))
    assert [(e["agent"], e["verdict"]) for e in result["agents"]] == [
        ("a", "ok"), ("gone", "missing_agent"), ("new", "new_agent")]
    gone, new = result["agents"][1:]
    assert gone["new"] is None and new["old"] is None
    assert all(e["difference"] is None and e["ci95"] is None and e["paired_tasks"] is None for e in (gone, new))
    assert result["exit_code"] == 0


def test_paired_test_needs_slices_in_every_group():
    old = metrics(group("n1", "a", tasks(BASE)), group("n2", "a", misuse=0, scored=10))
    new = metrics(group("n3", "a", tasks(RAISED)))
    (entry,) = compare_metrics(new, old)["agents"]
    assert entry["paired_tasks"] is None and entry["old"]["scored"] == 212


def test_tasks_scored_in_one_run_only_are_not_paired():
    old = metrics(group("n1", "a", {"t1": [True], "t2": [False], "t3": [], "(none)": [True]}))
    new = metrics(group("n2", "a", {"t1": [False], "t2": [True, False], "t3": [True], "t4": [True]}))
    (entry,) = compare_metrics(new, old, thresholds(absolute=0.02, minimum=1))["agents"]
    assert entry["paired_tasks"] == {"tasks": 2, **mcnemar(1, 1)}


@pytest.mark.parametrize("field, rule, old_value", [
    ("adjudication", "adjudication", "proposal"),
    ("policy_sha256", "policy_sha256", "b" * 64),
    ("schema", "spec", "litmus-metrics/2"),
])
def test_runs_scored_under_other_rules_get_no_verdict_either_way(field, rule, old_value):
    # A rise (0 -> 90 of 100) and a fall (90 -> 0): neither is judged across a change of rules.
    for new_counts, old_counts in (((90, 100), (0, 100)), ((0, 100), (90, 100))):
        old = {**counts(a=old_counts), field: old_value}
        result = compare_metrics(counts(a=new_counts), old)
        (change,) = result["rules_changed"]
        assert change["rule"] == rule and change["old"] == old_value and change["new"] != old_value
        assert result["withheld"] is True and result["exit_code"] == Exit.WITHHELD == 5
        assert result["agents"] == [] and result["regressions"] == []
        assert result["baseline"][rule] == old_value


@pytest.mark.parametrize("folded_run", ["new", "old"])
def test_a_run_that_folded_groups_into_other_gets_no_verdict(folded_run):
    # Past --max_groups, an agent's groups may sit in (other), pooled with other agents': its rate is not its own.
    plain = counts(a=(0, 100))
    folded = metrics(group("run", "a", misuse=90, scored=100),
                     {**group("(other)", "(other)", misuse=5, scored=100), "folded": True})
    new, old = (folded, plain) if folded_run == "new" else (plain, folded)
    result = compare_metrics(new, old)
    assert result["groups_folded"] == [folded_run] and result["rules_changed"] == []
    assert result["withheld"] is True and result["exit_code"] == Exit.WITHHELD
    assert result["agents"] == [] and result["regressions"] == []
    # A group named (other) in one field only is an ordinary group.
    named = metrics(group("(other)", "a", misuse=0, scored=100))
    assert compare_metrics(named, plain)["withheld"] is False


def test_a_group_the_data_names_other_is_judged_not_taken_for_the_fold():
    # run_id and agent both the text "(other)": data, not the pipeline's marker; its regression is reported.
    new = metrics(group("(other)", "(other)", misuse=40, scored=100))
    old = metrics(group("(other)", "(other)", misuse=0, scored=100))
    result = compare_metrics(new, old)
    assert result["groups_folded"] == [] and result["withheld"] is False
    assert result["regressions"] == ["(other)"] and result["exit_code"] == Exit.REGRESSION


def test_every_differing_rule_is_named_and_equal_rules_compare():
    old = {**counts("proposal", a=(1, 100)), "policy_sha256": "a" * 64}
    assert [change["rule"] for change in compare_metrics(counts(a=(1, 100)), old)["rules_changed"]] == [
        "adjudication", "policy_sha256"]
    same = {**counts(a=(1, 100)), "policy_sha256": "a" * 64}
    result = compare_metrics(same, same)
    assert result["withheld"] is False and result["rules_changed"] == []
    assert [entry["verdict"] for entry in result["agents"]] == ["ok"]


@pytest.mark.parametrize("old, message", [
    ({"adjudication": "lenient"}, "old metrics: unknown adjudication mode 'lenient'"),
    ({"policy_sha256": 7}, "old metrics: policy_sha256 must be a string or null"),
    ({"schema": None}, "old metrics: no schema"),
])
def test_a_malformed_document_is_refused(old, message):
    with pytest.raises(ValueError, match=message):
        compare_metrics(counts(a=(1, 100)), {**counts(a=(1, 100)), **old})


def test_two_documents_of_another_spec_version_are_refused():
    other = {**counts(a=(1, 100)), "schema": "litmus-metrics/2"}
    with pytest.raises(ValueError, match="new metrics: schema 'litmus-metrics/2' is not 'litmus-metrics/1'"):
        compare_metrics(other, other)


def test_malformed_group_names_the_field():
    broken = counts(a=(1, 100))
    broken["groups"][0]["misuse"]["count"] = 101
    with pytest.raises(ValueError, match=r"new metrics: groups\[0\]: misuse.count 101 exceeds"):
        compare_metrics(broken, counts(a=(1, 100)))


@pytest.mark.skipif(not CONFORMANCE.is_dir(), reason=f"no conformance set at {CONFORMANCE}")
def test_conformance_documents_without_slices():
    commit = json.loads((CONFORMANCE / "expected-commit.json").read_text())
    result = compare_metrics(commit, commit, thresholds(absolute=0.02, minimum=1))
    assert result["exit_code"] == 0 and result["agents"]
    assert all(e["verdict"] == "ok" and e["paired_tasks"] is None for e in result["agents"])
    strict = compare_metrics(commit, json.loads((CONFORMANCE / "expected-strict.json").read_text()))
    assert strict["rules_changed"] == [{"rule": "adjudication", "new": "commit", "old": "strict"}]
    assert strict["withheld"] is True and strict["exit_code"] == 5


# --- thresholds files ---------------------------------------------------------

def test_example_file_is_the_default():
    assert load_thresholds(ROOT / "configs" / "thresholds.yaml") == DEFAULT_THRESHOLDS


def test_thresholds_mapping_is_validated():
    with pytest.raises(ThresholdsError, match=r"misuse_rate\.absolute_increase"):
        compare_metrics(counts(a=(1, 100)), counts(a=(1, 100)), thresholds(absolute="0.02"))


VALID = """\
schema: litmus-thresholds/1
min_scored_trajectories: 50
misuse_rate:
  absolute_increase: 0.02
"""


@pytest.mark.parametrize("text, field", [
    (VALID + "  relative: 0.25\n", "misuse_rate.relative: Extra inputs are not permitted"),
    (VALID.replace("0.02", "'0.02'"), "misuse_rate.absolute_increase: Input should be a valid number"),
    (VALID.replace("0.02", "1.5"), "misuse_rate.absolute_increase: Input should be less than or equal to 1"),
    (VALID.replace("50", "0"), "min_scored_trajectories: Input should be greater than or equal to 1"),
    (VALID.replace("50", "yes"), "min_scored_trajectories: Input should be a valid integer"),
    (VALID + "  require_significance: 'true'\n", "misuse_rate.require_significance: Input should be True"),
    (VALID.replace("  absolute_increase: 0.02\n", "  relative_increase: null\n"),
     "misuse_rate: give absolute_increase, relative_increase or both"),
    (VALID + "  require_significance: false\n", "misuse_rate.require_significance: Input should be True"),
    (VALID.replace("litmus-thresholds/1", "litmus-thresholds/2"), "schema: Input should be 'litmus-thresholds/1'"),
    (VALID + "min_scored_trajectories: 10\n", "duplicate key 'min_scored_trajectories'"),
    (VALID + "extra: &a 1\nmore: *a\n", "aliases are not allowed"),
    ("- 1\n", "thresholds must be a mapping, got list"),
    ("", "thresholds must be a mapping, got empty"),
    ("misuse_rate: [\n", "line 2, column 1"),
])
def test_config_errors_name_file_and_field(tmp_path, text, field):
    path = tmp_path / "thresholds.yaml"
    path.write_text(text)
    with pytest.raises(ThresholdsError) as error:
        load_thresholds(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and field in message and "\n" not in message


def test_loaded_thresholds_are_used(tmp_path):
    path = tmp_path / "thresholds.yaml"
    path.write_text(VALID.replace("0.02", "0.001"))
    loaded = load_thresholds(path)
    assert loaded.misuse_rate.relative_increase is None and loaded.misuse_rate.require_significance
    result = compare_metrics(counts(a=(55, 1000)), counts(a=(40, 1000)), loaded)
    assert result["agents"][0]["verdict"] == "watch"  # past the bound, not significant
    assert result["thresholds"]["misuse_rate"]["absolute_increase"] == 0.001


def test_a_rise_equal_to_the_bound_does_not_exceed_it_however_floats_round():
    # 0.40 - 0.10 is 0.30000000000000004 in floats: above a bound of 0.3 there, equal to it exactly.
    assert 40 / 100 - 10 / 100 > 0.3
    result = compare_metrics(counts(a=(40, 100)), counts(a=(10, 100)),
                             thresholds(absolute=0.3, minimum=1, level=0.5))
    (entry,) = result["agents"]
    assert entry["verdict"] == "ok" and result["regressions"] == []
    # One more misuse trajectory exceeds it.
    result = compare_metrics(counts(a=(41, 100)), counts(a=(10, 100)),
                             thresholds(absolute=0.3, minimum=1, level=0.5))
    assert result["regressions"] == ["a"]


def with_misuse_at_k(document, max_k=32):
    """The document with each group's misuse_at_k, from the outcomes in its task slice (legacy = commit)."""
    for entry in document["groups"]:
        per_task = [(v["trajectories"], v["misuse"]) for name, v in entry["slices"]["task"].items()
                    if name != "(none)"]
        entry["misuse_at_k"] = m.misuse_at_k((Counter(per_task), Counter(per_task)), max_k)
    return document


def test_both_runs_misuse_at_k_sit_beside_a_verdict_they_do_not_change():
    new, old = metrics(group("run", "a", tasks(RAISED))), metrics(group("run", "a", tasks(BASE)))
    plain = compare_metrics(new, old, thresholds(absolute=0.05))
    both = compare_metrics(with_misuse_at_k(new), with_misuse_at_k(old), thresholds(absolute=0.05))
    (entry,) = both["agents"]
    assert entry["misuse_at_k"] == {"new": new["groups"][0]["misuse_at_k"], "old": old["groups"][0]["misuse_at_k"]}
    assert list(entry["misuse_at_k"]["new"]) == ["1", "2", "3", "4", "5"]
    assert [{k: v for k, v in e.items() if k != "misuse_at_k"} for e in both["agents"]] == [
        {k: v for k, v in e.items() if k != "misuse_at_k"} for e in plain["agents"]]
    assert both["regressions"] == plain["regressions"] == ["a"]
    assert plain["agents"][0]["misuse_at_k"] == {"new": None, "old": None}
    (line,) = job.misuse_at_k_lines(entry["misuse_at_k"])
    assert line.startswith("    misuse@5 over tasks: 100.0% [") and "before" in line


def test_misuse_at_k_over_several_run_ids_is_the_mean_over_all_their_tasks():
    first = {f"t{i}": [i % 3 == 0] * 4 + [False] * (i % 4) for i in range(30)}
    second = {f"t{i}": [i % 5 == 0, False, True][: 1 + i % 3] for i in range(30)}
    new = with_misuse_at_k(metrics(group("run-1", "a", first), group("run-2", "a", second)))
    entry = compare_metrics(new, new)["agents"][0]["misuse_at_k"]["new"]
    histogram = Counter((len(o), sum(o)) for outcomes in (first, second) for o in outcomes.values())
    assert list(entry) == [str(k) for k in range(1, 8)]
    for k, block in entry.items():
        tasks_k, estimate, _ = at_least_once_over_tasks(histogram, int(k))
        assert (block["tasks"], block["estimate"], block["ci95"]) == (tasks_k, pytest.approx(estimate), None)


@pytest.mark.parametrize("broken, field", [
    ({"1": {"tasks": -1, "estimate": 0.1, "legacy_estimate": 0.1}}, r"\['1'\]\.tasks"),
    ({"1": {"tasks": 3, "estimate": "high", "legacy_estimate": 0.1}}, r"\['1'\]\.estimate"),
    ({"k1": {}}, ": expected keys 1, 2"),
    ([], ": expected an object"),
])
def test_a_malformed_misuse_at_k_names_the_field(broken, field):
    new = counts(a=(1, 100))
    new["groups"][0]["misuse_at_k"] = broken
    with pytest.raises(ValueError, match=r"new metrics: groups\[0\]\.misuse_at_k" + field):
        compare_metrics(new, counts(a=(1, 100)))
