"""trend.html links each night to its report, and labels a change of policy with how its rules changed."""

from litmus_score.report import trend
from litmus_score.report.trend_page import render_trend
from tests.test_report import PAYLOADS, Tags, group, metrics_doc

DIFF = {"rules_added": [{"id": "a"}, {"id": "b"}], "rules_removed": [], "settings_changed": [],
        "rules_changed": [{"id": "c", "fields": ["when"], "new": {}, "old": {}}]}


def report_links(page):
    """The hrefs of the page's links that lead out of it, as a browser's tokenizer reads them."""
    return [attrs["href"] for tag, attrs in Tags(page).tags if tag == "a" and not attrs["href"].startswith("#")]


def night(date, folder, policy, listed=True, comparison=None):
    outputs = [{"path": "metrics.json"}] + ([{"path": "report.html"}] if listed else [])
    return {"date": date, "folder": folder, "metrics": metrics_doc([group("r", "a")], policy=policy),
            "manifest": {"night": {"date": date}, "outputs": outputs}, "comparison": comparison}


def document(folders):
    comparison = {"policy_diff": DIFF, "rules_changed": [], "regressions": [],
                  "baseline": {"night": "2026-12-01", "folder": folders[0], "rescored": {"rules": {}}}}
    return trend.trend_document([night("2026-12-01", folders[0], "ab" * 32),
                                 night("2026-12-02", folders[1], "cd" * 32, comparison=comparison),
                                 night("2026-12-03", folders[2], "cd" * 32, listed=False)])


def test_each_night_names_its_report_when_its_manifest_lists_one():
    nights = document(["date=2026-12-01", "date=2026-12-02", "date=2026-12-03"])["nights"]
    assert [n["report"] for n in nights] == ["date=2026-12-01/report.html", "date=2026-12-02/report.html", None]
    links = report_links(render_trend(document(["date=2026-12-01", "date=2026-12-02", "date=2026-12-03"])))
    assert links == ["date%3D2026-12-01/report.html", "date%3D2026-12-02/report.html"]


def test_a_hostile_folder_name_is_one_quoted_path_segment():
    hostile = ["javascript:alert(1)", "../x?y#z", PAYLOADS[4]]
    # A breakout of the attribute, quoted; the third night has no report, and a step is no folder.
    breakout = render_trend(document([PAYLOADS[4], "..", "c"]))
    (escaped,) = report_links(breakout)
    assert escaped.startswith("%22%27%20onmouseover%3D%22document.body.setAttribute")
    assert escaped.endswith("/report.html")
    page = render_trend(document(hostile))
    links = report_links(page)
    # Each link is relative (no scheme, no query, no fragment, no other folder) and leads to the folder's report.
    assert links == ["javascript%3Aalert%281%29/report.html", "..%2Fx%3Fy%23z/report.html"]
    for link in links + [escaped]:
        assert link.count("/") == 1 and not set(":?#\"'<> ") & set(link)
    for tag, attrs in Tags(page).tags + Tags(breakout).tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
    assert "<iframe" not in page + breakout


def test_a_policy_change_is_labelled_with_its_rules_and_leads_to_its_night():
    page = render_trend(document(["date=2026-12-01", "date=2026-12-02", "date=2026-12-03"]))
    assert "policy changed: 2 added, 1 changed</text></a>" in page
    # The label's link and the night's row: the second night.
    assert page.count('<a href="#night-2">') == 3  # the totals' chart and agent a's two: its rates, its misuse@K
    assert '<tr id="night-2">' in page
    row = page[page.index('<tr id="night-2">'):page.index('<tr id="night-3">')]
    assert "rule added: <span class=\"mono\">a</span>" in row and "rule changed: <span class=\"mono\">c</span>" in row


def test_a_change_label_in_the_right_half_ends_at_its_rule():
    """So that a change on one of the last nights is not cut at the chart's edge."""
    nights = trend.trend_document([night(f"2026-12-0{day}", f"date=2026-12-0{day}", "ab" * 32 if day < 4 else "cd" * 32)
                                   for day in range(1, 5)])
    page = render_trend(nights)
    label = page[page.index('<a href="#night-4"><text'):]
    assert 'text-anchor="end"' in label[:label.index(">policy changed")]
    assert 'text-anchor="end"' not in render_trend(document(["x", "y", "z"])).split("policy changed")[0][-200:]
