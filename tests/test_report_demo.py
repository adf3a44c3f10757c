"""The report of the demo data in headless Chromium: the validity table, every evidence case,
a layout that fits 800 px, and `show`'s link opening the folded evidence."""

import re

import pyarrow.parquet as pq
import pytest

from litmus_score import synthetic
from litmus_score.scoring.layout import METRICS_FILE, REPORT_FILE, TRAJECTORIES_DIR
from litmus_score.scoring.validity import HELD, audit_rows
from pipeline.cli import main
from tests import browser
from tests.conftest import RUNNER, load_json

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

# The regression badge's background (report template CSS): one per tool that is not valid.
NOT_VALID = "#fbd5d5"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    synthetic.generate(str(root / "shards"), shards=4, seed=0, profile="reference-1200")
    out = root / "out"
    assert main(["score", "--input", str(root / "shards" / "*.parquet"), "--output", str(out), *RUNNER]) == 0
    return out


def text_of(dom: str) -> str:
    import html

    return html.unescape(dom)


@pytest.mark.browser
def test_the_browser_shows_the_37_and_the_9_and_the_diverging_tools(demo):
    dom = text_of(browser.dump_dom(demo / REPORT_FILE))
    rows = pq.read_table(demo / TRAJECTORIES_DIR).to_pylist()
    over = [r["trajectory_id"] for r in rows if r["over_penalized"]]
    under = [r["trajectory_id"] for r in rows if r["under_penalized"]]
    assert (len(over), len(under)) == (37, 9)
    evidence = dom[dom.index('<h2 id="evidence">'):]
    for trajectory_id in over + under:
        assert f'<td class="mono">{trajectory_id}<br>' in evidence, trajectory_id
    validity = dom[dom.index('<h2 id="validity">'):dom.index('<h2 id="evidence">')]
    tools = audit_rows(load_json(demo / METRICS_FILE)["totals"]["validity"])
    diverging = [t["tool"] for t in tools if not t["valid"]]
    assert diverging and validity.count("not valid") == len(diverging)
    positions = [validity.index(f">{tool}</td>") for tool in diverging]
    assert positions == sorted(positions)  # least faithful first
    # Every tool fails the strict condition; list_dir's 1,177 calls kept their verdict.
    held = [t["tool"] for t in tools if t["verdict"] == HELD]
    assert len(diverging) == len(tools) and held == ["list_dir"]
    assert validity.count('<span class="verdict ok">held</span>') == 1
    assert "0 of 1,177 (0.00%), ≤ 0.23%" in validity


@pytest.mark.browser
def test_screenshot_shows_the_validity_table(demo, tmp_path):
    png = browser.screenshot(demo / REPORT_FILE, tmp_path / "report.png", height=3000)
    image = browser.read_png(png)
    tools = audit_rows(load_json(demo / METRICS_FILE)["totals"]["validity"])
    # Each tool's "not valid" badge is painted, below the charts: the section rendered, not just sat in the DOM.
    badges = browser.count_near(image, NOT_VALID, tolerance=3)
    assert badges > 500 * sum(not t["valid"] for t in tools), badges
    assert browser.count_near(image[:1500], NOT_VALID, tolerance=3) == 0


@pytest.mark.browser
def test_the_report_fits_800_px_and_is_short_with_its_evidence_folded(demo):
    with browser.Tab(width=1280) as tab:
        tab.open(demo / REPORT_FILE)
        # It was 16,000 px with every evidence section open.
        assert tab.evaluate("document.documentElement.scrollHeight") < 8000
        assert tab.evaluate("document.querySelectorAll('details[open]').length") == 0
    with browser.Tab(width=800) as tab:
        tab.open(demo / REPORT_FILE)
        assert tab.evaluate("document.documentElement.scrollWidth") <= 800
        tab.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        assert tab.evaluate("document.documentElement.scrollWidth") <= 800
        assert tab.evaluate("[...document.querySelectorAll('table, figure, nav')]"
                            ".filter(e => e.getBoundingClientRect().right > innerWidth).length") == 0


@pytest.mark.browser
def test_shows_link_opens_the_trajectorys_folded_evidence(demo, capsys):
    rows = pq.read_table(demo / TRAJECTORIES_DIR).to_pylist()
    case = next(r for r in rows if r["under_penalized"])
    assert main(["show", str(demo), case["trajectory_id"], "--run", case["run_id"]]) == 0
    (link,) = re.findall(r"^in the report: (file://\S+)$", capsys.readouterr().out, re.MULTILINE)
    uri, fragment = link.split("#")
    assert uri == (demo / REPORT_FILE).resolve().as_uri()
    with browser.Tab(width=800, height=900) as tab:
        tab.open(demo / REPORT_FILE, "#" + fragment)
        state = tab.evaluate(f"""(() => {{
            const row = document.getElementById({fragment!r});
            const box = row.getBoundingClientRect();
            return {{target: row.matches(':target'), open: row.closest('details').open,
                     others: document.querySelectorAll('details[open]').length, top: box.top, bottom: box.bottom,
                     below: document.querySelector('nav').getBoundingClientRect().bottom,
                     text: row.cells[0].textContent}};
        }})()""")
    # Chromium opened the <details> that holds the target, and the row shows below the sticky contents bar.
    assert state["target"] and state["open"] and state["others"] == 1
    assert state["below"] <= state["top"] and state["bottom"] <= 900
    assert state["text"].startswith(case["trajectory_id"])
