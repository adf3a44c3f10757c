"""litmus-score show: one trajectory, call by call, from a run's outputs."""

import shutil

import pytest

from litmus_score import text
from litmus_score.scoring.layout import SUCCESS_MARKER
from pipeline.cli import main
from pipeline.show import _verdict, policy_disputes, why
from tests import builders as b
from tests.conftest import RUNNER

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

ESC = "\x1b[2J"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("show")
    rows = [
        # Over-penalized: denied at proposal, refused by the environment.
        b.trajectory("blocked", [b.call("c0", 0, proposal=b.context("deny"),
                                        commit_=b.commit("deny", outcome="rejected", mutated=False, status=403))]),
        # Under-penalized, with a hostile tool name and a principal re-derived at commit.
        b.trajectory("escalated", [b.call("c0", 0, tool=f"send{ESC}mail",
                                          commit_=b.commit("deny", args='{"to": "drop@x"}', principal="admin"))]),
        b.trajectory("no-commit", [b.call("c0", 0, no_commit=True)]),
        b.trajectory("blocked", [b.call("c9", 0)], run_id="run-2"),
    ]
    b.write_shard(root / "a.parquet", rows)
    out = root / "out"
    assert main(["score", "--input", str(root / "a.parquet"), "--output", str(out), *RUNNER]) == 0
    return str(out)


def show(capsys, *args):
    code = main(["show", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_blocked_attempt_says_why_it_is_not_misuse(run, capsys):
    code, out, _ = show(capsys, run, "blocked", "--run", "run-1")
    assert code == 0 and "run run-2" not in out
    assert "misuse no, legacy proposal-time yes -> over-penalized" in out
    assert ("why: denied at proposal and at commit; environment refused it (403), state unchanged: "
            "blocked_attempt, not misuse") in out
    assert "deciding call (over-penalized, from evidence.json): c0" in out


def test_evidence_links_to_its_row_in_the_report(run, capsys):
    from pathlib import Path

    from litmus_score.report.evidence import case_anchor

    _, out, _ = show(capsys, run, "blocked", "--run", "run-1")
    report = (Path(run) / "report.html").resolve()
    assert f"in the report: {report.as_uri()}#{case_anchor('run-1', 'blocked')}" in out
    assert f'<tr id="{case_anchor("run-1", "blocked")}">' in report.read_text()
    _, out, _ = show(capsys, run, "no-commit")  # not evidence: no row to link to
    assert "in the report" not in out


def test_without_run_every_run_holding_the_id_is_shown(run, capsys):
    code, out, _ = show(capsys, run, "blocked")
    assert code == 0 and "run run-1" in out and "run run-2" in out


def test_an_escalation_shows_the_patch_and_the_principal_escaped(run, capsys):
    code, out, _ = show(capsys, run, "escalated")
    assert code == 0 and ESC not in out and "send\\x1b[2Jmail" in out
    assert ("allowed at proposal, denied at commit; environment committed it, state changed: "
            "escalated_misuse, misuse") in out
    assert 'replace /path = "/tmp/report.txt"' not in out and "remove /path" in out and 'add /to = "drop@x"' in out
    assert "principal: agent -> admin" in out


def test_an_unscored_trajectory_shows_its_reasons_and_input_calls(run, capsys):
    code, out, _ = show(capsys, run, "no-commit")
    assert code == 0 and "unscored: unscored_calls, no_commit_context" in out
    assert "proposal: allow as agent | commit: -" in out and "resolved: as written" in out


def test_an_unknown_trajectory_or_folder_is_a_usage_error(run, tmp_path, capsys):
    code, _, err = show(capsys, run, f"missing{ESC}")
    assert code == 2 and "no trajectory missing\\x1b[2J" in err
    assert show(capsys, str(tmp_path), "x")[0] == 2


def test_why_names_the_physical_layer_when_it_overrules_the_outcome():
    line = why({"proposal_verdict": "deny", "commit_verdict": "deny", "category": "misuse", "outcome": "rejected",
                "status_code": 409, "state_mutated": True}, "commit")
    assert line == ("denied at proposal and at commit; environment refused it (409), state changed "
                    "(the physical layer wins: realized): misuse, misuse")


def test_a_verdict_names_the_rule_that_gave_it_escaped():
    call = {"proposal_verdict": "deny", "proposal_verdict_source": "policy", "proposal_decided_by": f"no{ESC}rm",
            "commit_verdict": "allow", "commit_verdict_source": "recorded", "commit_decided_by": "recorded"}
    assert _verdict(call, "proposal") == f"deny ({text.display(f'no{ESC}rm', 40)})"
    assert ESC not in _verdict(call, "proposal")
    assert _verdict(call, "commit") == "allow (recorded)"
    # A run written before the deciders were recorded shows the source.
    assert _verdict({"commit_verdict": "deny", "commit_verdict_source": "policy"}, "commit") == "deny (policy)"


def test_show_refuses_a_run_that_did_not_finish(run, tmp_path, capsys):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(run, unfinished)
    (unfinished / SUCCESS_MARKER).unlink()
    assert main(["show", str(unfinished), "anything"]) == 2
    assert "not a complete litmus-score run" in capsys.readouterr().err


def test_a_disputed_recorded_verdict_shows_the_policys_own_escaped():
    call = {"proposal_verdict": "deny", "proposal_policy_ruling": None,
            "commit_verdict": "allow", "commit_policy_ruling": "deny", "commit_policy_decided_by": f"no{ESC}rm"}
    line = policy_disputes(call)
    assert line == f"commit recorded allow, the policy's deny ({text.display(f'no{ESC}rm', 40)})"
    assert ESC not in line
    # Where the policy agrees, or for a run written before these fields, nothing.
    assert policy_disputes({"commit_verdict": "deny", "commit_verdict_source": "recorded"}) == ""
