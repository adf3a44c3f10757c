"""RunMetricsCombineFn without a pipeline: create, add, merge, compact, extract."""

import itertools
import json
import random
from pathlib import Path

import pytest

from litmus_score.scoring import contract as c
from litmus_score.scoring import metrics as m
from litmus_score.scoring.policy import load_policy
from litmus_score.scoring.stats import at_least_once_over_tasks, wilson_interval
from litmus_score.scoring.trajectory import score_trajectory
from tests import builders as b
from transforms.metrics import RunMetricsCombineFn


def scored(misuse, legacy, tool="chmod", task="t1"):
    """Statistics of one scored trajectory with two calls of `tool`."""
    stats = m.new_group()
    m.merge(stats, {
        "counts": {"trajectories_input": 1, "trajectories_scored": 1, "calls_input": 2, "calls_scored": 2,
                   "misuse": misuse, "legacy_misuse": legacy},
        "categories": {"misuse": 2 * misuse, "benign": 2 - 2 * misuse},
        "gap": {m.gap_key("deny" if legacy else "allow", "deny" if misuse else "allow", True): 2},
        "tools": {tool: {**m.tool_stats(2, 2 * misuse), "by_category": {"misuse": 2 * misuse}}},
        "task_categories": {"finance": {"trajectories": 1, "misuse": misuse, "legacy_misuse": legacy}},
        "tasks": {task: {"trajectories": 1, "misuse": misuse, "legacy_misuse": legacy}},
        "attempts": {"scored": {task: 1}, **({"misuse": {task: 1}} if misuse else {}),
                     **({"legacy_misuse": {task: 1}} if legacy else {})},
    })
    return stats


def batch(*entries):
    """Per-group statistics of a batch: (run_id, agent, stats) entries."""
    out = {}
    for run_id, agent, stats in entries:
        m.merge(out.setdefault((run_id, agent), m.new_group()), stats)
    return out


def test_empty_accumulator_extracts_a_complete_document():
    fn = RunMetricsCombineFn(c.COMMIT)
    doc = fn.extract_output(fn.create_accumulator())
    assert doc["groups"] == [] and doc["policy_sha256"] is None
    assert doc["totals"]["trajectories"] == {
        "input": 0, "scored": 0, "unscored": 0, "duplicates_dropped": 0,
        "unscored_by_reason": dict.fromkeys(m.MODE_REASONS[c.COMMIT], 0),
    }
    assert doc["inputs"] == {"files": 0, "unreadable_files": 0, "rows_declared": 0, "rows_read": 0}
    assert doc["totals"]["misuse"] == {"count": 0, "rate": None, "ci95": None}
    assert set(doc["totals"]["calls"]["by_category"]) == set(c.CATEGORIES[c.COMMIT])
    assert doc["totals"]["slices"] == {"tool": {}, "task_category": {}}


def test_add_merge_compact_extract():
    fn = RunMetricsCombineFn(c.COMMIT, policy_sha256="ab" * 32)
    first = fn.add_input(fn.create_accumulator(), batch(("r1", "a", scored(1, 1)), ("r1", "a", scored(0, 1))))
    # Adding to a non-empty accumulator accumulates.
    first = fn.add_input(first, batch(("r1", "a", scored(1, 0, task="t2"))))
    unscored = m.new_group()
    m.merge(unscored, {"counts": {"trajectories_input": 1, "calls_input": 4},
                       "reasons": {"unscored_calls": 1, "no_commit_context": 1}})
    second = fn.add_input(fn.create_accumulator(), batch(("r1", "b", scored(0, 0)), ("r1", "a", unscored)))
    merged = fn.compact(fn.merge_accumulators([first, second, fn.create_accumulator()]))
    doc = fn.extract_output(merged)

    assert doc["policy_sha256"] == "ab" * 32
    assert [(g["run_id"], g["agent"]) for g in doc["groups"]] == [("r1", "a"), ("r1", "b")]
    a = doc["groups"][0]
    assert a["trajectories"]["input"] == 4 and a["trajectories"]["scored"] == 3
    assert a["trajectories"]["unscored_by_reason"]["no_commit_context"] == 1
    assert a["calls"]["input"] == 10 and a["calls"]["by_category"]["misuse"] == 4
    assert a["misuse"] == {"count": 2, "rate": 2 / 3, "ci95": wilson_interval(2, 3)}
    tool = a["slices"]["tool"]["chmod"]
    assert (tool["calls"], tool["trajectories"], tool["misuse"]["count"]) == (6, 3, 4)
    assert a["slices"]["task"] == {"t1": {"trajectories": 2, "misuse": 1, "legacy_misuse": 2},
                                   "t2": {"trajectories": 1, "misuse": 1, "legacy_misuse": 0}}
    assert a["adjudication_gap"] == [
        {"proposal_verdict": "allow", "commit_verdict": "deny", "state_mutated": True, "calls": 2},
        {"proposal_verdict": "deny", "commit_verdict": "allow", "state_mutated": True, "calls": 2},
        {"proposal_verdict": "deny", "commit_verdict": "deny", "state_mutated": True, "calls": 2},
    ]
    totals = doc["totals"]
    assert totals["trajectories"]["input"] == 5 and totals["misuse"]["count"] == 2
    assert "task" not in totals["slices"] and totals["slices"]["tool"]["chmod"]["calls"] == 8


def test_merge_does_not_depend_on_order():
    fn = RunMetricsCombineFn(c.PROPOSAL)
    parts = [fn.add_input(fn.create_accumulator(), batch(("r", f"a{i % 2}", scored(int(i % 3 == 0), 1))))
             for i in range(6)]
    assert fn.extract_output(fn.merge_accumulators(parts)) == fn.extract_output(fn.merge_accumulators(parts[::-1]))


def test_groups_without_run_or_agent_sort_first():
    fn = RunMetricsCombineFn(c.COMMIT)
    acc = fn.add_input(fn.create_accumulator(), batch(("r", "a", scored(0, 0)), (None, None, scored(0, 0))))
    assert [(g["run_id"], g["agent"]) for g in fn.extract_output(acc)["groups"]] == [(None, None), ("r", "a")]


def test_unknown_mode_is_rejected_at_construction():
    with pytest.raises(ValueError, match="unknown adjudication mode"):
        RunMetricsCombineFn("lenient")


def report(rows_declared, rows_read, error=None):
    return {"file": "f", "rows_declared": rows_declared, "rows_read": rows_read, "error": error}


def test_inputs_add_up_over_files():
    fn = RunMetricsCombineFn(c.COMMIT)
    parts = [fn.add_input(fn.create_accumulator(), m.input_statistics(r))
             for r in (report(10, 10), report(500, 300, "row group 1: corrupt"), report(None, 0, "not Parquet"))]
    acc = fn.add_input(fn.merge_accumulators(parts), batch(("r", "a", scored(0, 0))))
    doc = fn.extract_output(acc)
    assert doc["inputs"] == {"files": 3, "unreadable_files": 2, "rows_declared": 510, "rows_read": 310}
    assert [(g["run_id"], g["agent"]) for g in doc["groups"]] == [("r", "a")]


def tool_batch(names):
    return batch(*(("r", "a", scored(int(name[-1]) % 2, 1, tool=name, task=name)) for name in names))


@pytest.mark.parametrize("split", [1, 3, 7])
def test_slices_beyond_the_bound_fold_the_same_way_in_any_order(split):
    names = [f"tool-{i:03d}" for i in range(40)]
    fn = RunMetricsCombineFn(c.COMMIT, max_slice_keys=5)
    whole = fn.extract_output(fn.add_input(fn.create_accumulator(), tool_batch(names)))
    parts = [fn.add_input(fn.create_accumulator(), tool_batch(names[i::split])) for i in range(split)]
    assert fn.extract_output(fn.merge_accumulators(parts[::-1])) == whole
    group = whole["groups"][0]
    for kind in ("tool", "task"):
        kept = group["slices"][kind]
        assert len(kept) == 6 and m.OTHER in kept  # five names and the rest
    tools = group["slices"]["tool"]
    assert sum(tool["calls"] for tool in tools.values()) == 80 == group["calls"]["input"]
    assert tools[m.OTHER]["trajectories"] == 35
    assert whole["totals"]["slices"]["tool"] == tools


def test_slices_within_the_bound_are_not_folded():
    fn = RunMetricsCombineFn(c.COMMIT, max_slice_keys=40)
    doc = fn.extract_output(fn.add_input(fn.create_accumulator(), tool_batch([f"t{i}" for i in range(40)])))
    assert len(doc["groups"][0]["slices"]["tool"]) == 40 and m.OTHER not in doc["groups"][0]["slices"]["tool"]


def agent_batch(numbers):
    """One trajectory per agent; every third agent's run_id is null."""
    return batch(*(("r" if n % 3 else None, f"agent-{n:03d}", scored(n % 2, 1, task=f"task-{n}")) for n in numbers))


@pytest.mark.parametrize("split", [1, 4, 9])
def test_groups_beyond_the_bound_fold_the_same_way_in_any_order(split):
    agents = range(60)
    fn = RunMetricsCombineFn(c.COMMIT, max_groups=7)
    unbounded = RunMetricsCombineFn(c.COMMIT, max_groups=1000)
    whole = fn.extract_output(fn.add_input(fn.create_accumulator(), agent_batch(agents)))
    # Each part folds on its own (past twice the bound), then they merge in reverse.
    parts = [fn.add_input(fn.create_accumulator(), agent_batch(agents[i::split])) for i in range(split)]
    assert fn.extract_output(fn.merge_accumulators(parts[::-1])) == whole
    folded = [g for g in whole["groups"] if g.get("folded")]
    assert len(whole["groups"]) == 8 and len(folded) == 1  # seven groups and the rest
    other = folded[0]
    assert (other["run_id"], other["agent"]) == (m.OTHER, m.OTHER)
    assert other["trajectories"]["input"] == 53
    # Folding moves trajectories between groups, never changes the totals.
    assert whole["totals"] == unbounded.extract_output(unbounded.add_input({}, agent_batch(agents)))["totals"]
    assert sum(g["trajectories"]["input"] for g in whole["groups"]) == 60


def test_a_group_the_data_names_other_stays_its_own_beside_the_fold():
    # Seven groups past a bound of two: the fold is one group, the data's ("(other)", "(other)") another.
    fn = RunMetricsCombineFn(c.COMMIT, max_groups=2)
    entries = [(m.OTHER, m.OTHER, scored(1, 1))] + [("r", f"agent-{n}", scored(0, 0)) for n in range(6)]
    doc = fn.extract_output(fn.add_input({}, batch(*entries)))
    named_other = [g for g in doc["groups"] if (g["run_id"], g["agent"]) == (m.OTHER, m.OTHER)]
    folded = [g for g in doc["groups"] if g.get("folded")]
    assert len(folded) == 1 and len(doc["groups"]) == 3
    data_group = next((g for g in doc["groups"] if g in named_other and not g.get("folded")), None)
    kept = {g["agent"] for g in doc["groups"] if not g.get("folded")}
    # The data's group is kept or folded like any other, never merged with the fold by its name.
    assert sum(g["trajectories"]["input"] for g in doc["groups"]) == 7
    assert (data_group is not None) == (m.OTHER in kept)
    assert folded[0]["trajectories"]["input"] == 7 - 2


def test_a_null_run_id_is_another_group_than_the_text_none():
    fn = RunMetricsCombineFn(c.COMMIT, max_groups=2)
    doc = fn.extract_output(fn.add_input({}, batch((None, "a", scored(0, 0)), ("None", "a", scored(1, 1)))))
    assert [(g["run_id"], g["agent"]) for g in doc["groups"]] == [(None, "a"), ("None", "a")]


def test_a_bound_on_groups_must_be_positive():
    with pytest.raises(ValueError, match="max_groups"):
        RunMetricsCombineFn(c.COMMIT, max_groups=0)


def test_flagged_calls_are_counted_per_rule_through_add_merge_compact_extract():
    fn = RunMetricsCombineFn(c.COMMIT)

    def flagged(**per_rule):
        stats = scored(1, 0)
        stats["flagged_by_rule"] = dict(per_rule)
        return stats

    first = fn.add_input(fn.create_accumulator(), batch(("r", "a", flagged(**{"chmod-777": 2}))))
    first = fn.add_input(first, batch(("r", "a", flagged(recorded=1, **{"chmod-777": 1}))))
    second = fn.add_input(fn.create_accumulator(), batch(("r", "b", flagged(tools=3)), ("r", "c", scored(0, 0))))
    doc = fn.extract_output(fn.compact(fn.merge_accumulators([second, fn.create_accumulator(), first])))
    by_agent = {g["agent"]: g["flagged_by_rule"] for g in doc["groups"]}
    assert by_agent == {"a": {"chmod-777": 3, "recorded": 1}, "b": {"tools": 3}, "c": {}}
    assert list(by_agent["a"]) == sorted(by_agent["a"])  # sorted by name: the same bytes every run
    assert doc["totals"]["flagged_by_rule"] == {"chmod-777": 3, "recorded": 1, "tools": 3}
    assert fn.extract_output(fn.create_accumulator())["totals"]["flagged_by_rule"] == {}


def policy_trajectories(seed, count):
    """`count` random one- to three-call trajectories of three agents that the example policy
    denies, by many rules and its principal check, some with verdicts the harness recorded."""
    rng = random.Random(seed)
    choices = [("chmod", {"path": "/srv/a", "mode": "777"}), ("chmod", {"path": "/srv/a", "mode": "0644"}),
               ("write_file", {"path": "/etc/passwd"}), ("write_file", {"path": "/tmp/x"}),
               ("transfer_funds", {"amount": 50000}), ("transfer_funds", {"amount": 5}),
               ("kill_process", {"pid": 1}), ("read_file", {"path": "/home/u/.env"})]
    rows = []
    for i in range(count):
        calls = []
        for step in range(rng.randint(1, 3)):
            tool, arguments = rng.choice(choices)
            text = json.dumps(arguments)
            recorded = lambda: rng.choice([None, None, "allow", "deny"])  # noqa: E731
            principal = rng.choice(["agent", "agent", "agent-ops", "session-admin"])
            calls.append(b.call(f"c{step}", step, tool, text, b.context(recorded(), text, principal),
                                b.commit(recorded(), rng.choice(["committed", "rejected"]), principal=principal,
                                         args=text)))
        rows.append(b.trajectory(f"t{i}", calls, agent=f"agent-{i % 3}"))
    return rows


@pytest.mark.parametrize("mode", c.MODES)
def test_flagged_by_rule_equals_the_pure_scorers_count_in_any_split(mode):
    policy = load_policy(Path(__file__).resolve().parents[1] / "configs" / "policy.yaml")
    rows = b.python_rows(b.table(policy_trajectories(seed=24, count=90)))
    expected: dict = {}
    per_trajectory = []
    for row in rows:
        score = score_trajectory(row, mode, policy)
        per_trajectory.append(m.add_trajectory({}, row, score))
        for s in score.calls if score.scored else ():
            if s.category in c.MISUSE_CATEGORIES:
                rule = s.proposal_decided_by if mode == c.PROPOSAL else s.commit_decided_by
                for key in (row["agent"], "totals"):
                    counts = expected.setdefault(key, {})
                    counts[rule] = counts.get(rule, 0) + 1
    fn = RunMetricsCombineFn(mode)
    for split in (1, 4, 13):
        parts = [fn.create_accumulator() for _ in range(split)]
        for i, stats in enumerate(per_trajectory):
            parts[i % split] = fn.add_input(parts[i % split], stats)
        doc = fn.extract_output(fn.compact(fn.merge_accumulators(parts[::-1])))
        assert {g["agent"]: g["flagged_by_rule"] for g in doc["groups"]} | {
            "totals": doc["totals"]["flagged_by_rule"]} == {key: dict(sorted(v.items())) for key, v in expected.items()}
    # The example exercises rules, the principal check and the harness alike.
    assert {"chmod-777", "write-under-etc", "allowed_principals", "recorded"} <= set(expected["totals"])


def without_task(misuse, legacy):
    """Statistics of one scored trajectory without a task_id: an attempt at no task."""
    stats = scored(misuse, legacy, task=m.NO_TASK)
    stats["attempts"] = {}
    stats["counts"]["no_task_id"] = 1
    return stats


def enumerated(outcomes, k):
    """misuse@k over tasks by enumeration: outcomes are task -> its attempts' misuse flags."""
    shares = []
    for flags in outcomes.values():
        if len(flags) >= k:
            subsets = list(itertools.combinations(flags, k))
            shares.append(sum(any(subset) for subset in subsets) / len(subsets))
    return len(shares), sum(shares) / len(shares)


@pytest.mark.parametrize("split", [1, 3, 8])
def test_misuse_at_k_from_each_tasks_attempts_in_any_split(split):
    rng = random.Random(split)
    attempts = []
    for agent in ("a", "b"):
        for task in range(12):
            p = rng.choice([0, 0, 0.1, 0.5])
            attempts += [(agent, f"t{task}", rng.random() < p, rng.random() < p + 0.2)
                         for _ in range(rng.randint(1, 6))]
    rng.shuffle(attempts)
    entries = [("r", agent, scored(int(misuse), int(legacy), task=task)) for agent, task, misuse, legacy in attempts]
    entries.append(("r", "a", without_task(1, 1)))
    fn = RunMetricsCombineFn(c.COMMIT, max_k=5)
    parts = [fn.create_accumulator() for _ in range(split)]
    for i, entry in enumerate(entries):
        parts[i % split] = fn.add_input(parts[i % split], batch(entry))
    doc = fn.extract_output(fn.compact(fn.merge_accumulators(parts[::-1])))
    for group in doc["groups"]:
        mine = [a for a in attempts if a[0] == group["agent"]]
        commit, legacy = ({task: [a[flag] for a in mine if a[1] == task] for _, task, *_ in mine} for flag in (2, 3))
        assert list(group["misuse_at_k"]) == [str(k) for k in range(1, min(5, max(map(len, commit.values()))) + 1)]
        for key, at_k in group["misuse_at_k"].items():
            assert (at_k["tasks"], at_k["estimate"]) == pytest.approx(enumerated(commit, int(key)), abs=1e-12)
            assert at_k["legacy_estimate"] == pytest.approx(enumerated(legacy, int(key))[1], abs=1e-12)
            assert at_k["ci95"][0] <= at_k["estimate"] <= at_k["ci95"][1]
            assert at_k["legacy_ci95"][0] <= at_k["legacy_estimate"] <= at_k["legacy_ci95"][1]
    assert [g["no_task_id"] for g in doc["groups"]] == [1, 0] and doc["totals"]["no_task_id"] == 1
    # In the totals a task is (run_id, agent, task_id): both agents' t0 are two tasks.
    assert doc["totals"]["misuse_at_k"]["1"]["tasks"] == sum(g["misuse_at_k"]["1"]["tasks"] for g in doc["groups"])


def test_misuse_at_k_stops_at_the_most_attempts_or_max_k():
    entries = [("r", "a", scored(i % 2, 0, task="t")) for i in range(6)] + [("r", "b", scored(1, 1, task="u"))]
    doc = RunMetricsCombineFn(c.COMMIT, max_k=4).extract_output(m.add_statistics({}, batch(*entries)))
    assert [list(g["misuse_at_k"]) for g in doc["groups"]] == [["1", "2", "3", "4"], ["1"]]
    assert list(doc["totals"]["misuse_at_k"]) == ["1", "2", "3", "4"]
    unbounded = RunMetricsCombineFn(c.COMMIT).extract_output(m.add_statistics({}, batch(*entries)))
    assert list(unbounded["groups"][0]["misuse_at_k"]) == ["1", "2", "3", "4", "5", "6"]
    assert RunMetricsCombineFn(c.COMMIT).extract_output({})["totals"]["misuse_at_k"] == {}


def test_folded_groups_keep_each_groups_tasks_apart():
    # Six agents, one task name: folded together they are still six tasks, in the fold and the totals.
    entries = [("r", f"agent-{n}", scored(int(n < 3), 0, task="same")) for n in range(6) for _ in range(2)]
    fn = RunMetricsCombineFn(c.COMMIT, max_groups=2)
    parts = [fn.add_input({}, batch(*entries[i::3])) for i in range(3)]
    doc = fn.extract_output(fn.merge_accumulators(parts))
    folded = next(g for g in doc["groups"] if g.get("folded"))
    assert folded["misuse_at_k"]["2"]["tasks"] == 4
    expected = at_least_once_over_tasks({(2, 2): 3, (2, 0): 3}, 2)
    assert (doc["totals"]["misuse_at_k"]["2"]["tasks"], doc["totals"]["misuse_at_k"]["2"]["estimate"],
            doc["totals"]["misuse_at_k"]["2"]["ci95"]) == expected


def test_a_bound_on_k_must_be_positive():
    with pytest.raises(ValueError, match="max_k"):
        RunMetricsCombineFn(c.COMMIT, max_k=0)
