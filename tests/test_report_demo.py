"""The report of the demo data in headless Chromium: the validity table and every evidence case."""

import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from litmus_score.scoring.layout import METRICS_FILE, REPORT_FILE, TRAJECTORIES_DIR
from litmus_score.scoring.validity import audit_rows
from litmus_score import synthetic
from tests import browser
from tests.conftest import RUNNER, load_json

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


def test_screenshot_shows_the_validity_table(demo, tmp_path):
    png = browser.screenshot(demo / REPORT_FILE, tmp_path / "report.png", height=3000)
    image = browser.read_png(png)
    tools = audit_rows(load_json(demo / METRICS_FILE)["totals"]["validity"])
    # Each tool's "not valid" badge is painted, below the charts: the section rendered, not just sat in the DOM.
    badges = browser.count_near(image, NOT_VALID, tolerance=3)
    assert badges > 500 * sum(not t["valid"] for t in tools), badges
    assert browser.count_near(image[:1500], NOT_VALID, tolerance=3) == 0
