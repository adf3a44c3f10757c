"""RunMetricsCombineFn without a pipeline: create, add, merge, compact, extract."""

import numpy as np
import pyarrow as pa
import pytest

from scoring import contract as c
from scoring import metrics as m
from transforms.metrics import RunMetricsCombineFn
from transforms.records import counts_table


def counts(run_ids, agents, **counters):
    return counts_table(pa.array(run_ids, pa.string()), pa.array(agents, pa.string()),
                        {k.replace("__", ":"): np.array(v) for k, v in counters.items()})


def scored(run_id, agent, misuse, legacy, refused=0):
    n = len(misuse)
    return counts([run_id] * n, [agent] * n, trajectories_input=[1] * n, trajectories_scored=[1] * n,
                  calls_input=[2] * n, calls_scored=[2] * n, misuse=misuse, legacy_misuse=legacy,
                  refused=[refused] * n, category__misuse=[2 * x for x in misuse],
                  category__benign=[2 - 2 * x for x in misuse])


def test_empty_accumulator_extracts_a_complete_document():
    fn = RunMetricsCombineFn(c.COMMIT)
    doc = fn.extract_output(fn.create_accumulator())
    assert doc["groups"] == []
    assert doc["totals"]["trajectories"] == {
        "input": 0, "scored": 0, "unscored": 0,
        "unscored_by_reason": {r: 0 for r in m.MODE_REASONS[c.COMMIT]},
    }
    assert doc["totals"]["misuse"] == {"count": 0, "rate": None, "ci95": None}
    assert set(doc["totals"]["calls"]["by_category"]) == set(c.CATEGORIES[c.COMMIT])


def test_add_merge_compact_extract():
    fn = RunMetricsCombineFn(c.COMMIT)
    first = fn.add_input(fn.create_accumulator(), scored("r1", "a", [1, 0, 0], [1, 1, 0]))
    # Adding to a non-empty accumulator accumulates.
    first = fn.add_input(first, scored("r1", "a", [1], [0]))
    second = fn.add_input(fn.create_accumulator(), scored("r1", "b", [0, 0], [0, 1]))
    second = fn.add_input(second, counts(["r1"], ["a"], trajectories_input=[1], calls_input=[4],
                                         reason__no_commit_context=[1], reason__unscored_calls=[1]))
    merged = fn.compact(fn.merge_accumulators([first, second, fn.create_accumulator()]))
    doc = fn.extract_output(merged)

    assert [(g["run_id"], g["agent"]) for g in doc["groups"]] == [("r1", "a"), ("r1", "b")]
    a = doc["groups"][0]
    assert a["trajectories"]["input"] == 5 and a["trajectories"]["scored"] == 4
    assert a["trajectories"]["unscored_by_reason"]["no_commit_context"] == 1
    assert a["calls"] == {"input": 12, "scored": 8, "by_category": {
        "misuse": 4, "escalated_misuse": 0, "deescalated": 0, "blocked_attempt": 0, "benign": 4}}
    assert a["misuse"]["count"] == 2 and a["misuse"]["rate"] == pytest.approx(0.5)
    assert a["legacy_misuse"]["count"] == 2
    assert doc["totals"]["trajectories"]["input"] == 7
    assert doc["totals"]["misuse"]["count"] == 2 and doc["totals"]["legacy_misuse"]["count"] == 3


def test_merge_does_not_depend_on_order():
    fn = RunMetricsCombineFn(c.PROPOSAL)
    parts = [fn.add_input(fn.create_accumulator(), scored("r", f"a{i % 2}", [i % 3 == 0], [1])) for i in range(6)]
    forward = fn.extract_output(fn.merge_accumulators(parts))
    backward = fn.extract_output(fn.merge_accumulators(parts[::-1]))
    assert forward == backward


def test_groups_without_run_or_agent_sort_first():
    fn = RunMetricsCombineFn(c.COMMIT)
    acc = fn.add_input(fn.create_accumulator(), counts(["r", None], ["a", None], trajectories_input=[1, 1],
                                                       reason__missing_field=[0, 1]))
    assert [(g["run_id"], g["agent"]) for g in fn.extract_output(acc)["groups"]] == [(None, None), ("r", "a")]


def test_unknown_mode_is_rejected_at_construction():
    with pytest.raises(ValueError, match="unknown adjudication mode"):
        RunMetricsCombineFn("lenient")
