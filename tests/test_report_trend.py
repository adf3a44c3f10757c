"""litmus-score trend: the history of nights under an output root, as trend.json and trend.html.

Ten nights generated and scored as a scheduler would (`generate --plant_misuse`, `nightly`),
one policy change and one planted regression, read back only through their manifests, and
the page in headless Chromium: both are shown, and no line joins nights under other rules.
"""

import copy
import json
import shutil

import pytest

from litmus_score import synthetic
from litmus_score.report import trend
from litmus_score.report.page import COMMIT_COLOR, LEGACY_COLOR
from litmus_score.report.trend_page import (
    ALERT_COLOR,
    BOTTOM,
    CHANGE_COLOR,
    HEIGHT,
    LEFT,
    RIGHT,
    TOP,
    WIDTH,
    render_trend,
)
from pipeline.cli import main
from pipeline.trend import read_nights
from tests import browser, memfs
from tests.conftest import RUNNER, load_json
from tests.test_report import PAYLOADS, SCRIPT, Tags, at_k, body_tag, group, metrics_doc

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

DATES = [f"2026-12-{day:02d}" for day in range(1, 11)]
POLICY_CHANGE, REGRESSION = "2026-12-06", "2026-12-08"
AGENT = synthetic.AGENTS[3]  # the one whose misuse is planted
TRAJECTORIES = 800


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """runs/DATE/ for ten nights, scored by `nightly` into scores/: the policy's text changes on
    POLICY_CHANGE (its hash with it), and REGRESSION's shards plant a rise in AGENT's misuse."""
    base = tmp_path_factory.mktemp("trend")
    policy = base / "policy.yaml"
    shutil.copy("configs/policy.yaml", policy)
    changed = base / "policy-v2.yaml"
    changed.write_text(policy.read_text().replace("never read by an agent", "never read by any agent"))
    # Alert on a rise of 8 points, not on the few points two unplanted nights differ by.
    thresholds = base / "thresholds.yaml"
    thresholds.write_text("schema: litmus-thresholds/1\nmin_scored_trajectories: 50\n"
                          "misuse_rate: {absolute_increase: 0.08, require_significance: true}\n")
    for index, date in enumerate(DATES):
        planted = ["--plant_misuse", f"{AGENT}=2.5"] if date == REGRESSION else []
        assert main(["generate", "--output", str(base / "runs" / date), "--trajectories", str(TRAJECTORIES),
                     "--shards", "1", "--seed", str(50 + index), *planted]) == 0
    for date in DATES:
        code = main(["nightly", "--date", date, "--input", str(base / "runs" / "{date}" / "*.parquet"),
                     "--output_root", str(base / "scores"),
                     "--policy", str(changed if date >= POLICY_CHANGE else policy), "--thresholds", str(thresholds),
                     *RUNNER])
        # The night after the policy change gets no verdict (exit 5): its baseline was scored under the old one.
        # The policy change's night is judged on last night's inputs re-scored under its policy: quiet.
        assert code == (3 if date == REGRESSION else 0), date
    return base / "scores"


def test_nightly_keeps_the_trend_and_it_shows_the_change_and_the_alert(nights):
    document = load_json(nights / trend.TREND_FILE)  # written by the last night's `nightly`
    assert document["schema"] == "litmus-trend/1"
    assert [night["date"] for night in document["nights"]] == DATES
    changes = {night["date"]: night["rules_changed"] for night in document["nights"] if night["rules_changed"]}
    assert list(changes) == [POLICY_CHANGE] and [c["rule"] for c in changes[POLICY_CHANGE]] == ["policy_sha256"]
    assert [night["segment"] for night in document["nights"]] == [0] * 5 + [1] * 5
    alerted = {night["date"]: night["regressions"] for night in document["nights"] if night["regressions"]}
    assert alerted == {REGRESSION: [AGENT]}
    # The night of the change was compared with its baseline re-scored under its policy, and says so.
    after = document["nights"][DATES.index(POLICY_CHANGE)]
    assert after["baseline"] == DATES[DATES.index(POLICY_CHANGE) - 1] and after["baseline_rescored"]
    assert not after["compared_across_rules"] and after["policy_diff"] is not None
    # Each night's figures are its metrics.json's, pooled per agent over its run_ids.
    for night in document["nights"]:
        metrics = load_json(nights / night["folder"] / "metrics.json")
        totals = metrics["totals"]["trajectories"]
        assert night["unscored_share"] == totals["unscored"] / totals["input"]
        assert night["policy_sha256"] == metrics["policy_sha256"]
    assert [night["report"] for night in document["nights"]] == [f"date={date}/report.html" for date in DATES]
    (series,) = [agent["points"] for agent in document["agents"] if agent["agent"] == AGENT]
    rates = {point["date"]: point["misuse"]["rate"] for point in series}
    assert rates[REGRESSION] > 1.5 * max(rate for date, rate in rates.items() if date != REGRESSION)
    assert [point["alert"] for point in series] == [date == REGRESSION for date in DATES]
    metrics = load_json(nights / f"date={REGRESSION}" / "metrics.json")
    groups = [g for g in metrics["groups"] if g["agent"] == AGENT]
    night_point = series[DATES.index(REGRESSION)]
    assert night_point["scored"] == sum(g["trajectories"]["scored"] for g in groups)
    assert night_point["misuse"]["count"] == sum(g["misuse"]["count"] for g in groups)


@pytest.mark.browser
def test_the_page_shows_both_and_draws_no_line_across_the_change(nights, tmp_path):
    page = nights / trend.TREND_PAGE
    with browser.Tab(width=1280) as tab:
        tab.open(page)
        image = tab.screenshot(tmp_path / "trend.png")
        charts = tab.evaluate("""[...document.querySelectorAll('figure svg')].map(svg => {
            const box = svg.getBoundingClientRect();
            return {title: svg.querySelector('text').textContent, x: box.left + scrollX, y: box.top + scrollY,
                    scale: box.width / svg.viewBox.baseVal.width};
        })""")
    by_title = {chart["title"]: chart for chart in charts}
    assert {"all agents", *synthetic.AGENTS} <= set(by_title)

    def region(chart, left, right, top=TOP, bottom=HEIGHT - BOTTOM):
        """Pixels of a chart between two of its own x coordinates, inside its plot."""
        s = chart["scale"]
        return image[round(chart["y"] + top * s):round(chart["y"] + bottom * s),
                     round(chart["x"] + left * s):round(chart["x"] + right * s)]

    step = (WIDTH - LEFT - RIGHT) / len(DATES)
    night_x = [LEFT + (i + 0.5) * step for i in range(len(DATES))]
    change = DATES.index(POLICY_CHANGE)
    series = (COMMIT_COLOR, LEGACY_COLOR)
    for title in ("all agents", *synthetic.AGENTS):
        chart = by_title[title]
        # Between the two nights around the change: the dashed rule, and not one pixel of a series line.
        across = region(chart, night_x[change - 1] + 5, night_x[change] - 5)
        assert browser.count_near(across, CHANGE_COLOR, tolerance=20) > 60, title
        assert sum(browser.count_near(across, colour, tolerance=40) for colour in series) == 0, title
        # Between two nights of one segment, both lines are drawn.
        within = region(chart, night_x[change - 2] + 5, night_x[change - 1] - 5)
        assert min(browser.count_near(within, colour, tolerance=40) for colour in series) > 20, title
        # The alert band: on the regression's night, for the planted agent (and all agents) only.
        slot = DATES.index(REGRESSION)
        band = region(chart, night_x[slot] - step / 2 + 2, night_x[slot] + step / 2 - 2)
        painted = browser.count_near(band, ALERT_COLOR, tolerance=6)
        assert (painted > 2000) is (title in ("all agents", AGENT)), (title, painted)
    dom = browser.dump_dom(page)
    assert f"regression: {AGENT}" in dom and "policy (sha256) changed" in dom
    assert "re-scored under this night's rules" in dom and "across a change of rules" not in dom


@pytest.mark.browser
def test_each_night_links_to_its_report_and_the_regression_shows_what_drove_it(nights):
    page = nights / trend.TREND_PAGE
    with browser.Tab(width=1280) as tab:
        tab.open(page)
        # As the browser resolves them: every night's link, and each chart's mark of the change.
        links = tab.evaluate("[...document.querySelectorAll('tr[id^=night-] a')].map(a => a.href)")
        marks = tab.evaluate("""[...document.querySelectorAll('svg a')].map(a => [a.getAttribute('href'),
            a.textContent, document.getElementById(a.getAttribute('href').slice(1)).cells[0].textContent])""")
        assert links == [(nights / f"date={date}" / "report.html").as_uri() for date in DATES]
        assert marks and all(mark[1].startswith("policy changed: ") and mark[2] == POLICY_CHANGE for mark in marks)
        # The regression's night, reached by its link: its drivers, per tool and per task category.
        tab.open(nights / f"date={REGRESSION}" / "report.html")
        drivers = tab.evaluate("""[...document.querySelectorAll('table.drivers')].map(table =>
            [...table.rows].map(row => [...row.cells].map(cell => cell.textContent)))""")
        named = tab.evaluate("document.getElementById('drivers').nextElementSibling.nextElementSibling.textContent")
    comparison = load_json(nights / f"date={REGRESSION}" / "comparison.json")
    (entry,) = [agent for agent in comparison["agents"] if agent["agent"] == AGENT]
    assert named.startswith(AGENT) and len(drivers) == 2
    for table, dimension in zip(drivers, ("tool", "task_category")):
        assert table[0][0] == dimension.replace("_", " ")
        assert [row[0] for row in table[1:]] == [driver["name"] for driver in entry["drivers"][dimension]]
        assert [row[-1] for row in table[1:]] == [f"{driver['contribution'] * 100:+.1f}"
                                                  for driver in entry["drivers"][dimension]]


def test_only_complete_nights_are_read_through_their_manifests(nights, tmp_path, capsys):
    root = tmp_path / "scores"
    shutil.copytree(nights, root)
    # A night still being written (no _SUCCESS), one whose metrics.json no longer matches its
    # manifest, and folders that are no nights.
    shutil.copytree(root / "date=2026-12-10", root / "date=2026-12-11")
    (root / "date=2026-12-11" / "_SUCCESS").unlink()
    shutil.copytree(root / "date=2026-12-10", root / "date=2026-12-12")
    metrics = root / "date=2026-12-12" / "metrics.json"
    metrics.write_text(metrics.read_text().replace('"scored"', '"scored" ', 1))
    (root / "date=2026-13-01").mkdir()
    (root / "date=2026-13-01" / "_SUCCESS").write_text("")
    (root / "notes").mkdir()
    assert main(["trend", str(root), "--nights", "4"]) == 0
    out = capsys.readouterr().out
    assert "warning: date=2026-12-12 left out:" in out and "does not match its manifest" in out
    document = load_json(root / trend.TREND_FILE)
    # The latest four complete nights by date, of which one cannot be read: three, and why not the fourth.
    assert [night["date"] for night in document["nights"]] == DATES[-3:]
    assert [left["folder"] for left in document["skipped"]] == ["date=2026-12-12"]
    assert "trend: 3 night(s), 2026-12-08 to 2026-12-10; alerts: 2026-12-08; rules changed: never" in out
    # A night folder holding another night's results is not that night.
    manifest = root / "date=2026-12-10" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"date": "2026-12-10"', '"date": "2026-12-09"'))
    _, skipped = read_nights(str(root))
    assert "date=2026-12-10" in [left["folder"] for left in skipped]
    assert "holds the night '2026-12-09', not 2026-12-10" in " ".join(left["reason"] for left in skipped)


def test_a_root_without_a_complete_night_is_a_usage_error(tmp_path, capsys):
    assert main(["trend", str(tmp_path / "nowhere")]) == 2
    assert "no complete night under" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()
    assert main(["trend", str(tmp_path), "--nights", "0"]) == 2


def test_nights_on_an_object_store(tmp_path, capsys):
    """The root on a Beam filesystem with GCS's semantics: read and written through FileSystems only."""
    root = f"{memfs.SCHEME}://bucket/trend-scores"
    for date, seed in (("2026-12-01", 61), ("2026-12-02", 62)):
        synthetic.generate(str(tmp_path / date), 400, 1, seed=seed)
        assert main(["nightly", "--date", date, "--input", str(tmp_path / "{date}" / "*.parquet"),
                     "--output_root", root, *RUNNER]) == 0
    assert "trend: 2 night(s) in memtest://bucket/trend-scores/trend.html" in capsys.readouterr().out
    objects = memfs.objects(root + "/")
    document = json.loads(objects[f"{root}/{trend.TREND_FILE}"])
    assert [night["date"] for night in document["nights"]] == ["2026-12-01", "2026-12-02"]
    assert document["nights"][1]["baseline"] == "2026-12-01"
    assert objects[f"{root}/{trend.TREND_PAGE}"].startswith(b"<!DOCTYPE html>")
    assert not any("/.partial-" in path for path in objects)


def night(date, metrics, comparison=None, unreadable=()):
    return {"date": date, "folder": f"date={date}", "metrics": metrics,
            "manifest": {"night": {"date": date}, "unreadable_files": list(unreadable)}, "comparison": comparison}


def test_segments_follow_every_rule_and_missing_nights_break_a_line():
    base = metrics_doc([group("r1", "a", scored=100, misuse=10), group("r2", "a", scored=50, misuse=20),
                        group("r1", "b")])
    other_mode = dict(copy.deepcopy(base), adjudication="strict")
    other_spec = dict(copy.deepcopy(base), schema="litmus-metrics/2")
    without_b = metrics_doc([group("r1", "a")])
    nights = [night("2026-12-01", base), night("2026-12-02", without_b), night("2026-12-03", base),
              night("2026-12-04", other_mode), night("2026-12-05", other_spec),
              night("2026-12-06", base, unreadable=["x.parquet"])]
    document = trend.trend_document(nights)
    assert [n["segment"] for n in document["nights"]] == [0, 0, 0, 1, 2, 3]
    assert [[c["rule"] for c in n["rules_changed"]] for n in document["nights"]] == [
        [], [], [], ["adjudication"], ["spec", "adjudication"], ["spec"]]
    assert [n["incomplete_input"] for n in document["nights"]] == [False] * 5 + [True]
    a = next(agent["points"] for agent in document["agents"] if agent["agent"] == "a")
    assert a[0]["scored"] == 150 and a[0]["misuse"]["count"] == 30 and a[0]["misuse"]["rate"] == 0.2
    # The page joins nights 1-2-3 for agent a, and nothing after; agent b's nights 1 and 3 are not joined.
    from litmus_score.report.trend_page import Geometry, _series

    index = {n["date"]: i for i, n in enumerate(document["nights"])}
    geometry = Geometry(len(nights), 1.0)
    assert len(_series(a, index, geometry, "misuse", COMMIT_COLOR)["paths"]) == 1
    assert _series(a, index, geometry, "misuse", COMMIT_COLOR)["paths"][0].count(" L") == 2
    b = next(agent["points"] for agent in document["agents"] if agent["agent"] == "b")
    assert [p["date"] for p in b] == ["2026-12-01", "2026-12-03", "2026-12-04", "2026-12-05", "2026-12-06"]
    assert _series(b, index, geometry, "misuse", COMMIT_COLOR)["paths"] == []


def adversarial_trend():
    groups = [group("r", payload) for payload in PAYLOADS]
    first = metrics_doc(groups, policy=SCRIPT)
    second = metrics_doc(copy.deepcopy(groups), policy=PAYLOADS[0])
    comparison = {"regressions": PAYLOADS, "rules_changed": [{"rule": "policy_sha256"}],
                  "baseline": {"night": SCRIPT, "folder": PAYLOADS[1]}}
    return trend.trend_document([night("2026-12-01", first), night("2026-12-02", second, comparison)],
                                [{"folder": "date=2026-12-03", "reason": PAYLOADS[2]}])


@pytest.mark.browser
@pytest.mark.parametrize("csp", [True, False], ids=["as-written", "csp-removed"])
def test_hostile_names_are_inert_in_chromium(tmp_path, csp):
    page = render_trend(adversarial_trend())
    assert "<script" not in page.lower() and "<img" not in page.lower()
    for tag, attrs in Tags(page).tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
    if not csp:
        meta = page[page.index('<meta http-equiv="Content-Security-Policy"'):]
        page = page.replace(meta[:meta.index(">") + 1], "")
    path = tmp_path / "trend.html"
    path.write_text(page, encoding="utf-8")
    dom = browser.dump_dom(path)
    assert "data-pwned" not in body_tag(dom)
    assert "&lt;script&gt;document.body.setAttribute('data-pwned','script')&lt;/script&gt;" in dom
    assert dom.count("<figure>") == 1 + len(PAYLOADS) + 1  # all agents, each agent, the unscored share


def test_rendering_is_deterministic():
    assert render_trend(adversarial_trend()) == render_trend(adversarial_trend())


def test_misuse_at_k_is_drawn_at_one_k_for_all_of_an_agents_nights():
    first = metrics_doc([group("r1", "a"), group("r1", "b")])
    second = metrics_doc([group("r1", "a"), group("r2", "a"), group("r1", "b")])
    first["groups"][1]["misuse_at_k"] = {str(k): at_k(30, 0.04 * k, 0.05 * k) for k in range(1, 11)}
    second["groups"][2]["misuse_at_k"] = {str(k): at_k(30, 0.03 * k, 0.07 * k) for k in range(1, 13)}
    older = metrics_doc([group("r1", "b")])
    del older["groups"][0]["misuse_at_k"]  # a night scored before misuse@k has no point
    # As metrics.json holds them: keys sorted, "10" before "2".
    first, second = (json.loads(json.dumps(doc, sort_keys=True)) for doc in (first, second))
    document = trend.trend_document([night("2026-12-01", first), night("2026-12-02", second),
                                     night("2026-12-03", older)])
    by_agent = {agent["agent"]: agent["misuse_at_k"] for agent in document["agents"]}
    # b: nights with K = 10 and K = 12 are both drawn at 10.
    assert by_agent["b"]["k"] == 10 and [p["date"] for p in by_agent["b"]["points"]] == ["2026-12-01", "2026-12-02"]
    assert [p["misuse"]["rate"] for p in by_agent["b"]["points"]] == [
        first["groups"][1]["misuse_at_k"]["10"]["estimate"], second["groups"][2]["misuse_at_k"]["10"]["estimate"]]
    # a's second night pools two runs: the tasks-weighted mean, with no interval.
    pooled = by_agent["a"]["points"][1]
    assert pooled["tasks"] == 20 and pooled["misuse"]["ci95"] is None
    assert pooled["misuse"]["rate"] == pytest.approx(second["groups"][0]["misuse_at_k"]["3"]["estimate"])
    page = render_trend(document)
    assert "b: misuse@10 over tasks" in page and "a: misuse@3 over tasks" in page
    assert page.count("<figure>") == 1 + 2 + 1  # one figure per agent holds both of its charts
