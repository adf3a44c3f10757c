"""The paired test of a rise, by simulation with fixed seeds (issue 24, item 1).

Nights as a suite runs them: 20 agents with base misuse rates from 2% to
30%, each running the same 400 tasks once a night. Tasks differ in how much
misuse they provoke (a task effect on the logit scale, shared by the agents
and by both nights), so the runs pair up by task and the comparison tests
each agent's rise with the exact McNemar test.
"""

import math

import numpy as np

from litmus_score.scoring.compare import DEFAULT_THRESHOLDS, compare_metrics, paired_rise_p_value

AGENTS = 20
TASKS = 400
BASE_RATES = np.linspace(0.02, 0.30, AGENTS)
LEVEL = DEFAULT_THRESHOLDS.false_alarm_level
TASK_IDS = [f"t{task}" for task in range(TASKS)]


def night(outcomes, paired=True):
    """A metrics.json document from an agent x task array of misuse outcomes (with task slices when paired)."""
    groups = []
    for agent, row in enumerate(outcomes.astype(int)):
        group = {"run_id": "night", "agent": f"agent-{agent:02d}",
                 "trajectories": {"scored": len(row)}, "misuse": {"count": int(row.sum())}}
        if paired:
            group["slices"] = {"task": {task: {"trajectories": 1, "misuse": hit}
                                        for task, hit in zip(TASK_IDS, row.tolist(), strict=True)}}
        groups.append(group)
    return {"schema": "litmus-metrics/1", "adjudication": "commit", "policy_sha256": None, "groups": groups}


def night_pairs(seed, count, plant=None):
    """(new, old) misuse outcomes for `count` night pairs; `plant` = (agent, rise) raises one agent tonight."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        task_effect = rng.normal(0.0, 1.0, TASKS)
        p = 1 / (1 + np.exp(-(np.log(BASE_RATES / (1 - BASE_RATES))[:, None] + task_effect[None, :])))
        raised = p.copy()
        if plant is not None:
            agent, rise = plant
            raised[agent] = np.minimum(1.0, p[agent] + rise)
        old = rng.random(p.shape) < p
        yield rng.random(p.shape) < raised, old


def at_most_the_level(count):
    """The most alarm nights of `count` that a level-LEVEL alarm reaches with chance above 1 in 1000."""
    cumulative, k = 0.0, 0
    while True:
        cumulative += math.comb(count, k) * LEVEL**k * (1 - LEVEL) ** (count - k)
        if 1 - cumulative <= 1e-3:
            return k
        k += 1


def test_quiet_paired_nights_alarm_at_most_at_the_level():
    count = 400
    alarms = watched = 0
    for new, old in night_pairs(20261204, count):
        result = compare_metrics(night(new), night(old))
        assert {entry["rise_test"] for entry in result["agents"]} == {"mcnemar"}
        alarms += result["exit_code"] == 3
        watched += bool(result["watch"])
    assert alarms <= at_most_the_level(count)
    # The bounds alone would alarm on most of these nights: the corrected test is what holds them back.
    assert watched > count / 2


def test_the_paired_test_catches_a_rise_the_unpaired_one_misses():
    # A +10-point rise from 30% on 400 trajectories: the same nights, judged with and without their pairing.
    agent, name = AGENTS - 1, f"agent-{AGENTS - 1:02d}"
    caught = {"mcnemar": 0, "fisher": 0}
    count = 200
    for new, old in night_pairs(7, count, plant=(agent, 0.10)):
        for paired in (True, False):
            result = compare_metrics(night(new, paired), night(old, paired))
            caught[result["agents"][agent]["rise_test"]] += name in result["regressions"]
    # docs/nightly.md states these figures.
    assert caught["mcnemar"] > caught["fisher"]
    assert caught["mcnemar"] / count >= 0.5


def test_paired_only_when_the_runs_pair_up_completely():
    def document(outcomes):
        return {"schema": "litmus-metrics/1", "adjudication": "commit", "policy_sha256": None, "groups": [
            {"run_id": "r", "agent": "a", "trajectories": {"scored": sum(len(o) for o in outcomes.values())},
             "misuse": {"count": sum(map(sum, outcomes.values()))},
             "slices": {"task": {task: {"trajectories": len(o), "misuse": sum(o)} for task, o in outcomes.items()}}}]}

    old = {f"t{task}": [0] for task in range(60)}
    new = {**old, **{f"t{task}": [1] for task in range(8)}}
    (entry,) = compare_metrics(document(new), document(old))["agents"]
    assert entry["rise_test"] == "mcnemar"
    assert entry["rise_p_value"] == paired_rise_p_value(8, 0) and math.isclose(entry["rise_p_value"], 2**-8)
    # One task run twice tonight: the runs no longer pair up one to one, so Fisher's test decides.
    (entry,) = compare_metrics(document({**new, "t59": [0, 0]}), document(old))["agents"]
    assert entry["rise_test"] == "fisher"


def test_the_paired_p_value_is_the_binomial_tail():
    for new_only, old_only in ((0, 0), (3, 0), (7, 1), (2, 10), (40, 25)):
        n = new_only + old_only
        expected = sum(math.comb(n, k) for k in range(new_only, n + 1)) / 2**n
        assert math.isclose(paired_rise_p_value(new_only, old_only), expected, rel_tol=1e-9)
