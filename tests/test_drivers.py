"""What drove a regression: comparison.json's drivers per tool and task category, the terminal and the report.

Trajectories are drawn at random (fixed seeds) and summed into metrics.json's slices as the pipeline
sums them; the expected drivers are computed from the trajectories themselves, not from the slices.
"""

import random

import pytest

from litmus_score.report.page import render_report
from litmus_score.scoring.compare import compare_metrics
from litmus_score.scoring.drivers import TOP
from pipeline.job import TERMINAL_DRIVERS, comparison_lines
from tests.test_report import PAYLOADS, SCRIPT, Tags, manifest_doc
from tests.test_report import group as report_group
from tests.test_report import metrics_doc as report_metrics

TOOLS = [f"tool_{i:02d}" for i in range(14)]
CATEGORIES = ["finance", "os-ops", "prompt-injection", "benign-control"]


def trajectories(seed, n, misuse_per_call, tools=TOOLS, categories=CATEGORIES):
    """n trajectories: (category, [(tool, misuse)]), each call misuse with the tool's chance."""
    draw = random.Random(seed)
    return [(draw.choice(categories),
             [(tool, draw.random() < misuse_per_call(tool)) for tool in draw.sample(tools, draw.randint(1, 5))])
            for _ in range(n)]


def as_group(run_id, agent, drawn):
    """A metrics.json group of scored trajectories: its misuse count and its tool and task-category slices."""
    tools, categories = {}, {}
    for category, calls in drawn:
        slice_ = categories.setdefault(category, {"trajectories": 0, "misuse": {"count": 0}})
        slice_["trajectories"] += 1
        slice_["misuse"]["count"] += any(misuse for _, misuse in calls)
        for tool, misuse in calls:
            entry = tools.setdefault(tool, {"calls": 0, "misuse": {"count": 0}})
            entry["calls"] += 1
            entry["misuse"]["count"] += misuse
    misuse = sum(any(m for _, m in calls) for _, calls in drawn)
    return {"run_id": run_id, "agent": agent, "trajectories": {"scored": len(drawn)},
            "misuse": {"count": misuse, "rate": misuse / len(drawn)},
            "slices": {"tool": tools, "task_category": categories}}


def document(*groups):
    return {"schema": "litmus-metrics/1", "adjudication": "commit", "policy_sha256": None,
            "groups": list(groups), "totals": {}}


def quiet(tool):
    return 0.03


def worse(tool):  # tool_03 and tool_07 go bad
    return {"tool_03": 0.35, "tool_07": 0.2}.get(tool, 0.03)


@pytest.fixture(scope="module")
def nights():
    """Agent `a` regresses (drawn as two run_ids tonight, pooled), `b` does not; tonight's and the baseline's
    trajectories per agent."""
    drawn = {("new", "a"): trajectories(1, 300, worse) + trajectories(2, 300, worse),
             ("old", "a"): trajectories(3, 600, quiet),
             ("new", "b"): trajectories(4, 600, quiet), ("old", "b"): trajectories(5, 600, quiet)}
    new = document(as_group("r1", "a", drawn["new", "a"][:300]), as_group("r2", "a", drawn["new", "a"][300:]),
                   as_group("r1", "b", drawn["new", "b"]))
    old = document(as_group("r0", "a", drawn["old", "a"]), as_group("r0", "b", drawn["old", "b"]))
    return drawn, compare_metrics(new, old)


def expected(drawn_new, drawn_old, key):
    """name -> (new total, new misuse, old total, old misuse, contribution), from the trajectories."""
    counts = {}
    for side, drawn in ((0, drawn_new), (1, drawn_old)):
        for category, calls in drawn:
            if key == "task_category":
                units = [(category, any(m for _, m in calls))]
            else:
                units = calls
            for name, misuse in units:
                entry = counts.setdefault(name, [0, 0, 0, 0])
                entry[2 * side] += 1
                entry[2 * side + 1] += misuse
    return {name: (*c, c[1] / len(drawn_new) - c[3] / len(drawn_old)) for name, c in counts.items()}


def test_the_regressed_agent_gets_its_drivers_from_the_trajectories(nights):
    drawn, comparison = nights
    by_agent = {entry["agent"]: entry for entry in comparison["agents"]}
    assert comparison["regressions"] == ["a"] and by_agent["b"]["drivers"] is None
    drivers = by_agent["a"]["drivers"]
    for key, unit in (("tool", "calls"), ("task_category", "trajectories")):
        want = expected(drawn["new", "a"], drawn["old", "a"], key)
        entries = drivers[key]
        listed = [entry for entry in entries if not entry.get("folded")]
        for entry in listed:
            new_total, new_misuse, old_total, old_misuse, contribution = want[entry["name"]]
            assert (entry["new"][unit], entry["new"]["misuse"], entry["old"][unit], entry["old"]["misuse"]) == \
                (new_total, new_misuse, old_total, old_misuse)
            assert entry["contribution"] == pytest.approx(contribution, abs=1e-12)
        # Largest contribution first; the ones listed are the largest.
        contributions = [entry["contribution"] for entry in listed]
        assert contributions == sorted(contributions, reverse=True)
        unlisted = [c[4] for name, c in want.items() if name not in {entry["name"] for entry in listed}]
        assert min(contributions) >= max(unlisted, default=-1)
        assert sum(entry["contribution"] for entry in entries) == pytest.approx(sum(c[4] for c in want.values()))
    # The two tools planted lead, and the categories' contributions add up to the rise in the misuse rate.
    assert {entry["name"] for entry in drivers["tool"][:2]} == {"tool_03", "tool_07"}
    assert sum(entry["contribution"] for entry in drivers["task_category"]) == \
        pytest.approx(by_agent["a"]["difference"], abs=1e-12)


def test_a_watched_agent_gets_its_drivers_too():
    """Past its bound, not confirmed by the corrected test: reported, with what drove it."""
    new, old = trajectories(7, 600, quiet), trajectories(107, 600, quiet)
    bounds = {"schema": "litmus-thresholds/1", "min_scored_trajectories": 50,
              "misuse_rate": {"absolute_increase": 0.001}}
    (entry,) = compare_metrics(document(as_group("r", "b", new)), document(as_group("r", "b", old)), bounds)["agents"]
    assert entry["verdict"] == "watch"
    assert sum(driver["contribution"] for driver in entry["drivers"]["task_category"]) == \
        pytest.approx(entry["difference"], abs=1e-12)
    want = expected(new, old, "tool")
    assert {driver["name"]: driver["contribution"] for driver in entry["drivers"]["tool"] if not driver.get("folded")} \
        == pytest.approx({driver["name"]: want[driver["name"]][4] for driver in entry["drivers"]["tool"]
                          if not driver.get("folded")})


def test_beyond_the_top_names_the_rest_are_folded_under_a_flag_no_name_can_carry(nights):
    drawn, comparison = nights
    tools = next(entry for entry in comparison["agents"] if entry["agent"] == "a")["drivers"]["tool"]
    assert len(tools) == TOP + 1 and [entry.get("folded") for entry in tools] == [None] * TOP + [True]
    folded = tools[-1]
    want = expected(drawn["new", "a"], drawn["old", "a"], "tool")
    rest = set(want) - {entry["name"] for entry in tools[:TOP]}
    assert folded["names"] == len(rest) == len(TOOLS) - TOP
    assert folded["new"]["calls"] == sum(want[name][0] for name in rest)
    assert folded["old"]["misuse"] == sum(want[name][3] for name in rest)
    # Four categories: nothing folded.
    assert not any(entry.get("folded") for entry in next(
        entry for entry in comparison["agents"] if entry["agent"] == "a")["drivers"]["task_category"])


def test_a_tool_named_like_the_fold_is_an_ordinary_name():
    def named(tool):
        return 0.4 if tool == "(other)" else 0.02

    tools = ["(other)", *TOOLS]
    new = document(as_group("r", "a", trajectories(6, 600, named, tools=tools)))
    old = document(as_group("r", "a", trajectories(7, 600, quiet, tools=tools)))
    (entry,) = compare_metrics(new, old)["agents"]
    assert entry["verdict"] == "regression"
    first, *_, last = entry["drivers"]["tool"]
    assert first["name"] == "(other)" and "folded" not in first
    assert last["folded"] is True and last["names"] == len(tools) - TOP
    (tool_line,) = [line for line in comparison_lines(compare_metrics(new, old)) if "by tool" in line]
    assert f"(other) {first['old']['misuse']}/{first['old']['calls']} -> " in tool_line


def test_a_run_without_slices_has_no_drivers_for_them():
    new = as_group("r", "a", trajectories(8, 600, worse))
    old = as_group("r", "a", trajectories(9, 600, quiet))
    del old["slices"]["tool"]
    (entry,) = compare_metrics(document(new), document(old))["agents"]
    assert entry["drivers"]["tool"] is None and entry["drivers"]["task_category"]


def test_a_malformed_slice_names_its_field():
    new = as_group("r", "a", trajectories(8, 600, worse))
    new["slices"]["tool"]["tool_03"]["calls"] = "12"
    with pytest.raises(ValueError, match=r"new metrics: groups\[0\]\.slices\.tool\['tool_03'\]\.calls"):
        compare_metrics(document(new), document(as_group("r", "a", trajectories(9, 600, quiet))))


def test_the_terminal_names_the_top_drivers_escaped(nights):
    _, comparison = nights
    lines = comparison_lines(comparison)
    start = next(i for i, line in enumerate(lines) if line.startswith("  a: regression"))
    tool_line, category_line = lines[start + 1], lines[start + 2]
    drivers = comparison["agents"][0]["drivers"]
    assert tool_line.startswith("    by tool (misuse calls, baseline -> this run")
    for entry in drivers["tool"][:TERMINAL_DRIVERS]:
        assert (f"{entry['name']} {entry['old']['misuse']}/{entry['old']['calls']} -> "
                f"{entry['new']['misuse']}/{entry['new']['calls']} ({entry['contribution'] * 100:+.1f})") in tool_line
    assert f"; {len(drivers['tool']) - TERMINAL_DRIVERS} more in comparison.json" in tool_line
    assert category_line.startswith("    by task category")
    hostile = "\x1b[2J\u202eevil"
    drivers["tool"][0]["name"] = hostile
    shown = "\n".join(comparison_lines(comparison))
    assert hostile not in shown and "\\x1b[2J\\u202eevil" in shown


def test_the_report_shows_the_drivers_as_text(nights):
    _, comparison = nights
    comparison = {**comparison, "agents": [dict(entry) for entry in comparison["agents"]]}
    a = comparison["agents"][0]
    a["agent"] = SCRIPT
    tools = [dict(entry) for entry in a["drivers"]["tool"]]
    for entry, payload in zip(tools, PAYLOADS):
        entry["name"] = payload
    a["drivers"] = {**a["drivers"], "tool": tools}
    groups = [report_group("r", SCRIPT)]
    page = render_report(report_metrics(groups), manifest_doc(["a.parquet"]), comparison)
    section = page[page.index('<h3 id="drivers">'):page.index('<h2 id="agents">')]
    assert section.count('<table class="drivers">') == 2
    assert "&lt;script&gt;" in section and "<script" not in section.lower()
    assert {tag for tag, _ in Tags(section).tags} <= {"h3", "p", "b", "span", "table", "tr", "th", "td", "br"}
    assert f"{tools[-1]['names']} more, summed" in section
