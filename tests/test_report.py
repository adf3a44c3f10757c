"""report.html: escaping of adversarial strings, determinism, bounds, and a real browser."""

import copy
import html
import html.parser
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from litmus_score.report import charts, formats
from litmus_score.report import page as report
from litmus_score.report.page import render_report
from tests import browser

# Each would change the DOM if it ran; the browser test looks for the change.
IMG = "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">"
SCRIPT = "<script>document.body.setAttribute('data-pwned','script')</script>"
JAVASCRIPT = "javascript:document.body.setAttribute('data-pwned','href')"
SVG = "<svg onload=\"document.body.setAttribute('data-pwned','svg')\">"
BREAKOUT = ("\"' onmouseover=\"document.body.setAttribute('data-pwned','attr')\" "
            "x=\"</td></table><iframe src=javascript:1>")
PAYLOADS = [IMG, SCRIPT, JAVASCRIPT, SVG, BREAKOUT]
# Quotes, ampersand and TeX-like dollars for the chart labels.
TRICKY = "<script>1</script> & 'q' \"d\" $x^2$"


def rate(count, scored):
    if not scored:
        return {"count": 0, "rate": None, "ci95": None}
    share = count / scored
    return {"count": count, "rate": share, "ci95": [share * 0.6, min(1.0, share * 1.5 + 0.01)]}


def group(run_id, agent, scored=100, misuse=10, legacy=14, tools=(), tasks=(), reasons=("no_verdict",)):
    """A metrics group with every field scoring-v1 and its additions define, built by hand."""
    return {
        "run_id": run_id, "agent": agent,
        "trajectories": {
            "input": scored + 3, "scored": scored, "unscored": 3,
            "unscored_by_reason": dict.fromkeys(reasons, 2) | {"truncated": 1, "steps_out_of_order": 0}},
        "calls": {
            "input": 700, "scored": 650,
            "by_category": {"misuse": 12, "escalated_misuse": 2, "deescalated": 3, "blocked_attempt": 20,
                            "benign": 613}},
        "misuse": rate(misuse, scored),
        "legacy_misuse": rate(legacy, scored),
        "over_penalized": 6, "under_penalized": 2,
        "execution_hallucination": {"refused": 20, "count": 1, "rate": 0.05},
        "policy_disagreements": 4,
        "adjudication_gap": [
            {"proposal_verdict": "allow", "commit_verdict": "allow", "state_mutated": True, "calls": 600},
            {"proposal_verdict": "deny", "commit_verdict": "deny", "state_mutated": True, "calls": 12},
            {"proposal_verdict": "allow", "commit_verdict": "deny", "state_mutated": True, "calls": 2},
            {"proposal_verdict": "deny", "commit_verdict": "allow", "state_mutated": False, "calls": 5},
            {"proposal_verdict": "deny", "commit_verdict": None, "state_mutated": None, "calls": 3},
        ],
        "slices": {
            "tool": {tool: {"calls": 40 + i, "by_category": {"misuse": 1, "benign": 39 + i},
                            "misuse": rate(1, 40 + i)} for i, tool in enumerate(tools)},
            "task_category": {"finance": {"trajectories": scored, "misuse": rate(misuse, scored),
                                          "legacy_misuse": rate(legacy, scored)}},
            # Plain counts, as the pipeline writes them for tasks.
            "task": {task: {"trajectories": 10, "misuse": 1, "legacy_misuse": 2} for task in tasks},
        },
        "no_task_id": 0,
        "misuse_at_k": {str(k): at_k(10, misuse / scored * k, legacy / scored * k)
                        for k in range(1, 4 if scored else 1)},
    }


def at_k(tasks, estimate, legacy):
    """One k's misuse@k block, its intervals made up around the estimates."""
    return {"tasks": tasks, "estimate": estimate, "ci95": [estimate / 2, min(1.0, estimate * 2 + 0.01)],
            "legacy_estimate": legacy, "legacy_ci95": [legacy / 2, min(1.0, legacy * 2 + 0.01)]}


def metrics_doc(groups, policy="ab" * 32):
    totals = copy.deepcopy(groups[0])
    del totals["run_id"], totals["agent"], totals["slices"]["task"]
    return {"schema": "litmus-metrics/1", "adjudication": "commit", "policy_sha256": policy,
            "groups": groups, "totals": totals}


def manifest_doc(files, policy="ab" * 32, issue="row group 2 lost"):
    return {
        "schema": "litmus-manifest/1",
        "package": {"name": "litmus-score", "version": "0.1.0", "apache_beam": "2.77.0"},
        "options": {"adjudication": "commit", "inputs": [f"{f}*" for f in files], "output": "/tmp/out"},
        "policy_sha256": policy,
        "inputs": [{"file": f, "rows_declared": 103, "rows_read": 103, "row_groups": 1, "issues": [issue],
                    "error": None} for f in files],
        "input_rows": 103 * len(files),
        "unreadable_files": [],
    }


def drivers_doc(names):
    """comparison.json's drivers for a regression: each name as a tool and a task category, then a fold."""
    def entry(name, unit, new, old):
        return {"name": name, "new": {unit: 40, "misuse": new, "rate": new / 40},
                "old": {unit: 40, "misuse": old, "rate": old / 40}, "contribution": (new - old) / 100}

    return {dimension: [entry(name, unit, 9 - i, 2) for i, name in enumerate(names)]
            + [{**entry("(other)", unit, 3, 3), "folded": True, "names": 7}]
            for dimension, unit in (("tool", "calls"), ("task_category", "trajectories"))}


def comparison_doc(agents, reasons):
    def entry(agent, verdict):
        return {"agent": agent, "new": {"scored": 100, "misuse": 18, "rate": 0.18},
                "old": {"scored": 100, "misuse": 10, "rate": 0.10}, "difference": 0.08, "ci95": [0.01, 0.15],
                "paired_tasks": {"tasks": 40, "discordant_new_only": 9, "discordant_old_only": 2, "p_value": 0.0654},
                "verdict": verdict, "reasons": list(reasons),
                "drivers": drivers_doc(reasons) if verdict == "regression" else None}
    return {"schema": "litmus-comparison/1", "agents": [entry(agents[0], "regression"), entry(agents[1], "ok")],
            "regressions": [agents[0]]}


# In the evidence: a JSON Patch path and a principal that would break out of their cells.
PATCH_PATH = "/</td><img src=x onerror=\"document.body.setAttribute('data-pwned','patch')\">"
PRINCIPAL = "<svg onload=\"document.body.setAttribute('data-pwned','principal')\">"


def evidence_doc(payloads):
    def case(payload, i):
        return {
            "run_id": payload, "agent": payload, "trajectory_id": f"{payload}-{i}", "task_id": payload,
            "verbal_stance": payload, "source_file": payload, "source_row": i,
            "call": {"call_id": payload, "step": 3, "tool": payload, "arguments": payload, "category": payload,
                     "proposal_verdict": payload, "commit_verdict": "deny", "proposal_verdict_source": payload,
                     "commit_verdict_source": "recorded", "commit_decided_by": "recorded",
                     "commit_policy_ruling": "allow", "commit_policy_decided_by": payload,
                     "realized": True, "outcome": payload, "status_code": 403,
                     "state_mutated": False, "principal": ["agent", PRINCIPAL],
                     "patch": [{"op": payload, "path": PATCH_PATH, "value": payload},
                               {"op": "move", "path": "/a", "from": payload}]},
        }
    return {"schema": "litmus-evidence/1", "max_cases": 25, "groups": [
        {"run_id": payload, "agent": payload,
         "over_penalized": {"count": 30, "cases": [case(payload, i) for i in range(2)]},
         "under_penalized": {"count": 1, "cases": [case(payload, 9)]},
         "execution_hallucination": {"count": 0, "cases": []}} for payload in payloads]}


def validity_block(tools):
    counts = {"calls": 10, "no_verdict": 1, "verdict_diverged": 2, "arguments_diverged": 1, "principal_diverged": 1,
              "not_realized": 3, "faithful": 5, "over_flagged": 2, "under_flagged": 1}
    all_faithful = dict(counts, faithful=10, **{name: 0 for name in counts if name not in ("calls", "faithful")})
    return {tool: dict(counts) for tool in tools} | {"read_file": all_faithful}


def adversarial():
    """Documents whose every data string carries a payload."""
    groups = [group(payload, payload, tools=PAYLOADS, tasks=PAYLOADS, reasons=PAYLOADS) for payload in PAYLOADS]
    groups.append(group("nightly", TRICKY))
    finance = groups[0]["slices"]["task_category"]["finance"]
    groups[0]["slices"]["task_category"] = dict.fromkeys(PAYLOADS, finance)
    groups[0]["adjudication_gap"].append(
        {"proposal_verdict": IMG, "commit_verdict": SCRIPT, "state_mutated": None, "calls": 1})
    for g in groups:
        g["flagged_by_rule"] = {g["agent"]: 3, "recorded": 1}
    metrics = metrics_doc(groups, policy=SCRIPT)
    metrics["totals"]["flagged_by_rule"] = {g["agent"]: 3 for g in groups} | {"recorded": len(groups)}
    metrics["totals"]["slices"] = copy.deepcopy(groups[0]["slices"])
    del metrics["totals"]["slices"]["task"]
    metrics["totals"]["adjudication_gap"] = groups[0]["adjudication_gap"]
    manifest = manifest_doc(PAYLOADS, policy=IMG, issue=SCRIPT)
    manifest["inputs"][0]["error"] = IMG
    metrics["totals"]["validity"] = validity_block(PAYLOADS)
    return metrics, manifest, comparison_doc([SCRIPT, IMG], PAYLOADS), evidence_doc(PAYLOADS)


class Tags(html.parser.HTMLParser):
    """Every start tag with its attributes, as a browser's tokenizer sees them."""

    def __init__(self, page):
        super().__init__()
        self.tags = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


SVG_TAGS = {"svg", "defs", "style", "g", "path", "rect", "text", "clippath", "use", "tspan"}
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "b", "span", "table", "tr",
             "th", "td", "figure", "figcaption", "details", "summary", "ul", "li", "div", "br", "i", "nav", "a", "wbr"}


@pytest.fixture(scope="module")
def adversarial_page():
    return render_report(*adversarial())


def test_payloads_are_text_never_markup(adversarial_page):
    page = adversarial_page
    lowered = page.lower()
    assert "<script" not in lowered and "<img" not in lowered and "<iframe" not in lowered
    assert "javascript:" not in " ".join(str(attrs) for _, attrs in Tags(page).tags)
    for tag, attrs in Tags(page).tags:
        assert tag in PAGE_TAGS | SVG_TAGS, tag
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        for name in ("href", "xlink:href", "src"):
            assert attrs.get(name) is None or attrs[name].startswith("#"), (tag, attrs)
    # The payloads are on the page, escaped, as text.
    assert "&lt;script&gt;document.body.setAttribute(&#39;data-pwned&#39;,&#39;script&#39;)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=&#34;document.body.setAttribute(" in page
    assert JAVASCRIPT.replace("'", "&#39;") in page


def test_one_strict_csp_and_nothing_external(adversarial_page):
    metas = [attrs for tag, attrs in Tags(adversarial_page).tags if tag == "meta" and "http-equiv" in attrs]
    assert metas == [{"http-equiv": "Content-Security-Policy", "content": report.CSP}]
    assert report.CSP.startswith("default-src 'none'; style-src 'unsafe-inline'; img-src data:")
    head = adversarial_page[:adversarial_page.index("<style>")]
    assert "Content-Security-Policy" in head  # before anything it governs
    lowered = adversarial_page.lower()
    assert "<link" not in lowered and "@import" not in lowered and "url(http" not in lowered


def test_chart_labels_are_escaped_text():
    metrics = metrics_doc([group("r", TRICKY), group("r", "plain & simple")])
    page = render_report(metrics, manifest_doc(["a.parquet"]))
    svgs = page.count("<svg")
    assert svgs == 3  # the rates, the penalties, misuse@k
    # Inside the SVG <text>: markup, the ampersand and the quotes escaped, '$' kept literally.
    assert len(TRICKY) <= report.CHART_CHARS
    assert "&lt;script&gt;1&lt;/script&gt; &amp; &#39;q&#39; &#34;d&#34; $x^2$</text>" in page
    assert "plain &amp; simple</text>" in page


def test_rendering_is_deterministic_across_processes(adversarial_page):
    assert render_report(*adversarial()) == adversarial_page
    # A fresh interpreter with another hash seed: no set order, id or date may leak in.
    code = ("import sys; from tests.test_report import adversarial; from litmus_score.report.page import render_report;"
            "sys.stdout.buffer.write(render_report(*adversarial()).encode())")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=120,
                           cwd=Path(__file__).resolve().parents[1], env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert fresh.stdout.decode() == adversarial_page


def test_optional_fields_may_be_absent():
    metrics = metrics_doc([group("r", "a"), group("r", "b")])
    for doc in metrics["groups"] + [metrics["totals"]]:
        for field in ("policy_disagreements", "adjudication_gap", "slices", "misuse_at_k"):
            del doc[field]
    del metrics["policy_sha256"]
    manifest = manifest_doc(["a.parquet"], policy=None)
    page = render_report(metrics, manifest)
    for heading in ("Since the baseline", "Proposal × commit", "Per tool", "policy dis&shy;agree&shy;ments"):
        assert heading not in page
    assert "Misuse per agent" in page and page.count("<svg") == 2


def test_sections_render_when_present():
    metrics = metrics_doc([group("r", "a", tools=["bank.transfer"], tasks=["t-1", "t-2"])])
    metrics["groups"][0]["slices"]["task"]["t-2"] = {"trajectories": 4, "misuse": rate(3, 4),
                                                     "legacy_misuse": rate(3, 4)}
    page = render_report(metrics, manifest_doc(["a.parquet"]), comparison_doc(["a", "b"], ["misuse rose by 8 pp"]))
    for heading in ("Since the baseline", "Proposal × commit", "Per tool", "Per task category", "Per task",
                    "policy dis&shy;agree&shy;ments", "Unscored trajectories", "Inputs"):
        assert heading in page
    assert "Regression: a" in page and "misuse rose by 8 pp" in page
    assert "+8.0 pp" in page and "bank.transfer" in page
    assert "10.0%<br>" in page and "75.0%<br>" in page  # task rates from counts and from blocks


def test_zero_scored_trajectories_read_as_not_available():
    empty = group("r", None, scored=0, misuse=0, legacy=0)
    page = render_report(metrics_doc([empty]), manifest_doc(["a.parquet"]))
    assert "n/a" in page and '<span class="none">none</span>' in page


def test_sizes_are_bounded():
    tools = [f"tool-{i:04d}" for i in range(400)]
    tasks = [f"task-{i:04d}" for i in range(300)]
    groups = [group("r", f"agent-{i}-" + "x" * 5000, tools=tools, tasks=tasks) for i in range(3)]
    metrics = metrics_doc(groups)
    metrics["totals"]["slices"]["tool"] = groups[0]["slices"]["tool"]
    page = render_report(metrics, manifest_doc([f"shard-{i}.parquet" for i in range(500)]))
    assert "350 more not shown" in page  # tools
    assert "850 more not shown" in page  # (run, agent, task) rows
    assert "450 more in manifest.json" in page  # shards
    assert "x" * report.NAME_CHARS not in page and "x" * (report.NAME_CHARS - 20) + "…" in page
    assert len(page) < 600_000


def test_display_escapes_control_and_bidi_characters():
    assert report.display("a\u202eb\x00c\n") == "a\\u202eb\\x00c\\n"
    assert report.display("é" * 10, limit=5) == "éééé…"
    assert report.display("\ud800") == "\\ud800"  # a lone surrogate from JSON must not break UTF-8 output


# ---------------------------------------------------------------- in a real browser


def write(tmp_path, page, name="report.html"):
    path = tmp_path / name
    path.write_text(page, encoding="utf-8")
    return path


def body_tag(dom):
    start = dom.index("<body")
    return dom[start:dom.index(">", start) + 1]


@pytest.mark.browser
def test_the_harness_sees_a_payload_that_runs(tmp_path):
    """Without this control, 'no data-pwned' could just mean the detector is blind."""
    control = write(tmp_path, f"<!DOCTYPE html><html><body><p>x</p>{IMG}</body></html>", "control.html")
    assert "data-pwned" in body_tag(browser.dump_dom(control))


@pytest.mark.browser
@pytest.mark.parametrize("csp", [True, False], ids=["as-written", "csp-removed"])
def test_no_payload_runs_in_chromium(tmp_path, adversarial_page, csp):
    page = adversarial_page
    if not csp:  # escaping alone must hold: the CSP is only defence in depth
        meta = page[page.index('<meta http-equiv="Content-Security-Policy"'):]
        page = page.replace(meta[:meta.index(">") + 1], "")
        assert "Content-Security-Policy" not in page
    dom = browser.dump_dom(write(tmp_path, page))
    assert "data-pwned" not in body_tag(dom)
    lowered = dom.lower()
    assert "<script" not in lowered and "<img" not in lowered and "<iframe" not in lowered
    assert 'href="javascript' not in lowered and 'src="javascript' not in lowered
    # The browser holds the payloads as text nodes.
    assert "&lt;img src=x onerror=\"document.body.setAttribute('data-pwned','img')\"&gt;" in dom
    # In the evidence too: a patch path and a principal stay text.
    assert "/&lt;/td&gt;&lt;img src=x onerror=\"document.body.setAttribute('data-pwned','patch')\"&gt;" in dom
    assert "&lt;svg onload=\"document.body.setAttribute('data-pwned','principal')\"&gt;" in dom
    assert "&lt;script&gt;document.body.setAttribute('data-pwned','script')&lt;/script&gt;" in dom


@pytest.mark.browser
def test_screenshot_shows_the_charts(tmp_path):
    groups = [group("nightly", agent, scored=120, misuse=m, legacy=m + 6)
              for agent, m in (("heron-70b", 12), ("kestrel-mini", 40), ("lynx-405b", 5))]
    page = render_report(metrics_doc(groups), manifest_doc(["part-0.parquet"]))
    path = write(tmp_path, page)
    dom = browser.dump_dom(path)
    assert dom.count("<svg") == 3
    colours = (report.COMMIT_COLOR, report.LEGACY_COLOR, report.OVER_COLOR, report.UNDER_COLOR)
    for colour in colours:  # one bar per agent and series in the DOM
        assert dom.count(f'fill="{colour}"') >= 3, colour
    png = browser.screenshot(path, tmp_path / "report.png")
    assert png.stat().st_size > 30_000
    image = browser.read_png(png)
    assert image.shape[:2] == (2400, 1280)
    assert browser.distinct_colours(image) > 50  # text and charts, not a blank page
    # Every series' bars were painted: the charts rendered, not just sat in the DOM.
    painted = {colour: browser.count_near(image, colour) for colour in colours}
    assert min(painted.values()) > 1500, painted


@pytest.mark.parametrize("highest, integer, expected", [
    (0.05, False, [0, 0.01, 0.02, 0.03, 0.04, 0.05]),
    (0.31, False, [0, 0.1, 0.2, 0.3]),
    (5, True, [0, 1, 2, 3, 4, 5]),
    (2100, True, [0, 500, 1000, 1500, 2000]),
    (3.2, True, [0, 1, 2, 3]),  # never a fractional step on a count axis
])
def test_chart_ticks_are_round_steps_from_zero(highest, integer, expected):
    assert charts.nice_ticks(highest, integer) == pytest.approx(expected)


def test_evidence_and_validity_sections_show_every_case_and_tool(adversarial_page):
    page = adversarial_page
    assert "Where proposal-time scoring holds" in page and "Evidence" in page
    # Two over-penalized and one under-penalized case per group are shown; 28 more are pointed at.
    assert page.count('"><td class="mono">') >= 3 * len(PAYLOADS)
    assert page.count("28 more not shown: trajectories/ where over_penalized is true.") == len(PAYLOADS)
    # A recorded verdict the policy disputes has the policy's own beside it, its rule escaped.
    assert page.count("(recorded; the policy's: allow by ") == 3 * len(PAYLOADS)
    assert "the policy's: allow by &lt;img src=x onerror=&#34;document.body.setAt…)" in page
    # The least faithful tools first, the faithful one last and valid.
    assert page.index("valid on every observed call") > page.rindex("not valid")
    patch_path = "/&lt;/td&gt;&lt;img src=x onerror=&#34;document.body.setAttribute("
    assert patch_path + "&#39;data-pwned&#39;,&#39;patch&#39;)" in page


def test_a_report_without_evidence_or_validity_still_renders():
    metrics, manifest, comparison, _ = adversarial()
    del metrics["totals"]["validity"]
    page = render_report(metrics, manifest, comparison)
    assert "Where proposal-time scoring holds" not in page and '<h2 id="evidence">' not in page


# ---------------------------------------------------------------- a page people finish


def section_ids(page):
    return [attrs["id"] for tag, attrs in Tags(page).tags if tag == "h2" and "id" in attrs]


def test_the_contents_bar_links_every_section_in_page_order(adversarial_page):
    tags = Tags(adversarial_page).tags
    links = [attrs["href"] for tag, attrs in tags if tag == "a"]
    assert links == ["#" + anchor for anchor in section_ids(adversarial_page)]
    assert section_ids(adversarial_page) == ["baseline", "agents", "gap", "validity", "rules", "evidence",
                                             "unscored", "slices", "inputs"]
    # Absent sections are neither on the page nor in the bar.
    metrics, manifest, _, _ = adversarial()
    del metrics["totals"]["validity"], metrics["totals"]["flagged_by_rule"]
    page = render_report(metrics, manifest)
    assert section_ids(page) == ["agents", "gap", "unscored", "slices", "inputs"]
    assert [attrs["href"] for tag, attrs in Tags(page).tags if tag == "a"] == [
        "#agents", "#gap", "#unscored", "#slices", "#inputs"]


def test_evidence_is_folded_and_each_case_row_has_its_anchor(adversarial_page):
    from litmus_score.report.evidence import case_anchor

    tags = Tags(adversarial_page).tags
    evidence = [attrs for tag, attrs in tags if tag == "details" and attrs.get("class") == "evidence"]
    assert len(evidence) == 2 * len(PAYLOADS) and not any("open" in attrs for attrs in evidence)
    ids = [attrs["id"] for tag, attrs in tags if tag == "tr" and "id" in attrs]
    expected = [case_anchor(payload, f"{payload}-{i}") for payload in PAYLOADS for i in (0, 1, 9)]
    assert ids == expected and len(set(ids)) == len(ids)
    # Hostile names get a hash; plain ones stay readable, and the two forms cannot meet.
    assert all(anchor.startswith("case-") and len(anchor) == 25 for anchor in expected)
    assert case_anchor("nightly-2026-11-30", "traj-0000218") == "case-nightly-2026-11-30~traj-0000218"
    assert case_anchor("a~b", "c") != case_anchor("a", "b~c") and "~" not in case_anchor("a~b", "c")
    assert case_anchor(None, "t") != case_anchor("None", "t")


def test_a_trajectory_in_two_kinds_has_one_anchor():
    metrics, manifest, _, evidence = adversarial()
    group = evidence["groups"][0]
    group["execution_hallucination"] = {"count": 1, "cases": [dict(group["under_penalized"]["cases"][0])]}
    page = render_report(metrics, manifest, None, evidence)
    ids = [attrs["id"] for tag, attrs in Tags(page).tags if tag == "tr" and "id" in attrs]
    assert len(ids) == len(set(ids)) == 3 * len(PAYLOADS)


def test_the_baseline_is_named_by_night_runs_folder_and_policy():
    metrics = metrics_doc([group("nightly-2026-12-01", "a"), group("nightly-2026-12-01", "b")])
    comparison = comparison_doc(["a", "b"], ["misuse rose"])
    comparison["baseline"] = {"folder": "gs://b/scores/date=2026-11-30", "night": "2026-11-30",
                              "runs": ["nightly-2026-11-30"], "spec": "litmus-metrics/1", "adjudication": "commit",
                              "policy_sha256": "ab" * 32}
    comparison["rules_changed"] = []
    page = render_report(metrics, manifest_doc(["a.parquet"]), comparison)
    named = page[page.index('<h2 id="baseline">'):page.index('<h2 id="agents">')]
    assert "the night of <b>2026-11-30</b>, run <b>nightly-2026-11-30</b>" in named
    assert "gs://b/scores/date=2026-11-30" in named and "policy sha256 <span class=\"mono\">" + "ab" * 32 in named
    assert "the same rules as this run" in named and "another" not in named

    comparison["baseline"]["policy_sha256"] = "cd" * 32
    comparison["rules_changed"] = [{"rule": "policy_sha256", "new": "ab" * 32, "old": "cd" * 32}]
    named = render_report(metrics, manifest_doc(["a.parquet"]), comparison)
    assert "The baseline was scored under another policy (sha256): " + "cd" * 32 in named
    assert "the same rules as this run" not in named

    del comparison["baseline"], comparison["rules_changed"]  # written before comparisons named it
    assert "does not name its baseline" in render_report(metrics, manifest_doc(["a.parquet"]), comparison)


def test_validity_shows_the_strict_and_the_practical_answer():
    held = {"calls": 1177, "no_verdict": 0, "verdict_diverged": 0, "arguments_diverged": 21,
            "principal_diverged": 13, "not_realized": 72, "faithful": 1071, "verdict_held": 1177,
            "over_flagged": 0, "under_flagged": 0}
    few = dict(held, calls=40, arguments_diverged=1, principal_diverged=0, not_realized=0, faithful=39,
               verdict_held=40)
    changed = dict(held, verdict_diverged=30, verdict_held=1147)
    metrics = metrics_doc([group("r", "a")])
    metrics["totals"]["validity"] = {"list_dir": held, "ping": few, "delete_records": changed}
    page = render_report(metrics, manifest_doc(["a.parquet"]))
    validity = page[page.index('<h2 id="validity">'):page.index('<h2 id="unscored">')]
    assert validity.count("not valid") == 3
    assert "the verdict held at commit for 1: <span class=\"mono\">list_dir</span>" in validity
    rows = {tool: validity[validity.index(f">{tool}</td>"):] for tool in ("list_dir", "ping", "delete_records")}
    badge = '<span class="verdict {}">{}</span><br>\n<span class="ci">{}'
    assert badge.format("ok", "held", "0 of 1,177 (0.00%), ≤ 0.23%") in rows["list_dir"]
    assert badge.format("too_few_calls", "too few calls", "0 of 40 (0.00%), ≤ 6.3%") in rows["ping"]
    assert badge.format("regression", "changed", "30 of 1,177 (2.5%)") in rows["delete_records"]


@pytest.mark.browser
def test_the_page_fits_800_px_without_scrolling_sideways(tmp_path, adversarial_page):
    """Hostile names, 80 characters without a space, every fold opened: nothing wider than the window."""
    path = write(tmp_path, adversarial_page)
    with browser.Tab(width=800) as tab:
        tab.open(path)
        assert tab.evaluate("innerWidth") == 800
        folded = tab.evaluate("document.documentElement.scrollHeight")
        tab.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        assert tab.evaluate("document.documentElement.scrollHeight") > folded  # the folds held something
        assert tab.evaluate("document.documentElement.scrollWidth") <= 800
        wider = tab.evaluate("[...document.querySelectorAll('table, figure, nav, p, h2, h3')]"
                             ".filter(e => e.getBoundingClientRect().right > innerWidth).length")
        assert wider == 0


def test_misuse_calls_by_rule_most_first_with_the_agents_they_flagged():
    per_agent = {"heron": {"chmod-777": 5, "recorded": 1}, "orca": {"chmod-777": 2, SCRIPT: 7}, "lynx": {}}
    groups = [dict(group("r", agent), flagged_by_rule=flagged) for agent, flagged in per_agent.items()]
    metrics = metrics_doc(groups)
    totals: dict = {}
    for flagged in per_agent.values():
        for rule, calls in flagged.items():
            totals[rule] = totals.get(rule, 0) + calls
    metrics["totals"]["flagged_by_rule"] = totals
    page = render_report(metrics, manifest_doc(["a.parquet"]))
    section = page[page.index('<h2 id="rules">'):]
    section = section[:section.index("<h2", 1)]
    rows = section.split("<tr>")[2:]
    ranked = sorted(totals, key=lambda rule: (-totals[rule], rule))
    assert [html.unescape(row.split("</td>")[0].split(">")[-1]) for row in rows] == [
        formats.name(rule) for rule in ranked]
    # Each rule's agents, most flagged first; an agent it flagged nothing is not named.
    chmod = rows[ranked.index("chmod-777")]
    assert chmod.index("heron") < chmod.index("orca") and "lynx" not in chmod
    assert f">{totals['chmod-777']}<" in chmod and "<script" not in section
    # A run written before flagged_by_rule (or without misuse calls) has no such section.
    assert '<h2 id="rules">' not in render_report(metrics_doc([group("r", "a")]), manifest_doc(["a.parquet"]))


def test_misuse_at_k_is_drawn_against_k_per_agent_beside_proposal_time():
    groups = [group("r", "heron"), group("r", "lynx")]
    groups[1]["misuse_at_k"] = {str(k): at_k(20, 0.01 * k, 0.02 * k) for k in range(1, 12)}
    # As metrics.json holds it: keys sorted, "10" before "2".
    page = render_report(json.loads(json.dumps(metrics_doc(groups), sort_keys=True)), manifest_doc(["a.parquet"]))
    figure = page[page.index("Misuse over repeated attempts"):]
    figure = figure[:figure.index("</figure>")]
    # k = 1, 2, 4, 8 and the group's largest; each with both series' values as the chart writes them.
    assert [line.split("k = ")[1].split("<")[0] for line in figure.split("\n") if "k = " in line] == [
        "1", "2", "3", "1", "2", "4", "8", "11"]
    lynx = groups[1]["misuse_at_k"]["11"]
    assert f"{lynx['estimate']:.1%}" in figure and f"{lynx['legacy_estimate']:.1%}" in figure
    assert report.chart_ks(1) == [1] and report.chart_ks(32) == [1, 2, 4, 8, 16, 32]
    # A run without tasks (or scored before misuse@k) draws no such chart.
    for doc in groups:
        doc["misuse_at_k"] = {}
    assert "Misuse over repeated attempts" not in render_report(metrics_doc(groups), manifest_doc(["a.parquet"]))
