"""The Inspect scorer `litmus_score/commit_misuse`: `inspect score` with the registered
scorer, and `Task(scorer=...)` in `inspect eval`, on logs Inspect writes at test time;
sample by sample they agree with `litmus-score score` on the same log."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from tests.conftest import RUNNER
from tests.importers_support import load_json, read_rows, require

require("inspect_ai")
from pipeline.cli import main  # noqa: E402
from tests import inspect_logs  # noqa: E402  (needs inspect_ai)

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

SCORER = "litmus_score/commit_misuse"


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scorer")
    policies = {"replayed": folder / "replayed.yaml", "five": folder / "five.yaml"}
    policies["replayed"].write_text(inspect_logs.REPLAY_POLICY)
    policies["five"].write_text(inspect_logs.POLICY)
    return {"replayed": inspect_logs.replayed_log(folder / "replayed"),
            "five": inspect_logs.five_calls_log(folder / "five"), "policies": policies}


def inspect_score(log, policy, output, *args) -> None:
    """`inspect score` as a user runs it (Inspect's own command, from this checkout): the
    scorer found by its registered name."""
    command = [str(Path(sys.executable).parent / "inspect"), "score", str(log), "--scorer", SCORER,
               "-S", f"policy={policy}", *args, "--action", "append", "--output-file", str(output), "--display", "none"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def litmus_verdicts(log, policy, output, mode="commit") -> dict:
    """(sample id, epoch) -> (misuse, legacy_misuse) or the unscored reasons, from `litmus-score score`."""
    assert main(["score", "--input_format", "inspect", "--input", str(log), "--output", str(output),
                 "--policy", str(policy), "--adjudication", mode, *RUNNER]) == 0
    verdicts = {}
    for row in read_rows(output / "trajectories"):
        _, sample, epoch = row["trajectory_id"].split("/")
        verdicts[(sample, int(epoch))] = (row["misuse"], row["legacy_misuse"], row["over_penalized"],
                                          row["under_penalized"])
    for row in read_rows(output / "unscored"):
        _, sample, epoch = row["trajectory_id"].split("/")
        verdicts[(sample, int(epoch))] = tuple(row["reasons"])
    return verdicts


def inspect_verdicts(samples) -> dict:
    """The same, from the samples' commit_misuse scores."""
    verdicts = {}
    for sample in samples:
        score = sample.scores["commit_misuse"]
        if isinstance(score.value, float) and math.isnan(score.value):
            verdicts[(str(sample.id), sample.epoch)] = tuple(score.reason.split(","))
        else:
            meta = score.metadata
            assert score.value == {"misuse": float(meta["misuse"]), "legacy_misuse": float(meta["legacy_misuse"])}
            verdicts[(str(sample.id), sample.epoch)] = (meta["misuse"], meta["legacy_misuse"], meta["over_penalized"],
                                                        meta["under_penalized"])
    return verdicts


@pytest.mark.parametrize("name, mode", [("replayed", "commit"), ("five", "commit"), ("five", "proposal")])
def test_inspect_score_agrees_with_litmus_score_sample_by_sample(logs, tmp_path, name, mode):
    from inspect_ai.log import read_eval_log

    log, policy = logs[name], logs["policies"][name]
    inspect_score(log, policy, tmp_path / "scored.eval", "-S", f"adjudication={mode}")
    scored = read_eval_log(str(tmp_path / "scored.eval"))
    ours = litmus_verdicts(log, policy, tmp_path / "litmus", mode)
    assert inspect_verdicts(scored.samples) == ours
    # The eval's metrics are the run's rates: commit-time and proposal-time misuse.
    metrics = {score.name: score for score in scored.results.scores}
    totals = load_json(tmp_path / "litmus" / "metrics.json")["totals"]
    for name_ in ("misuse", "legacy_misuse"):
        assert metrics[name_].metrics["mean"].value == pytest.approx(totals[name_]["rate"])
        assert metrics[name_].scored_samples == totals["trajectories"]["scored"]
        assert "stderr" in metrics[name_].metrics
    # The harness's own scores are kept beside ours (--action append).
    if name == "replayed":
        assert all("breach" in sample.scores for sample in scored.samples)


def test_each_sample_names_its_category_its_deciding_call_and_rule(logs, tmp_path):
    from inspect_ai.log import read_eval_log

    inspect_score(logs["replayed"], logs["policies"]["replayed"], tmp_path / "scored.eval")
    samples = read_eval_log(str(tmp_path / "scored.eval")).samples
    scores = {sample.id: sample.scores["commit_misuse"] for sample in samples}
    for sample, categories in inspect_logs.REPLAY_CATEGORIES.items():
        if categories is None:
            assert scores[sample].reason == "call_count_mismatch"
            assert inspect_logs.HIDDEN_CALL in scores[sample].explanation
            continue
        assert scores[sample].answer == categories[0]
        assert [call["category"] for call in scores[sample].metadata["calls"]] == categories
    escalated = scores["escalated"]
    assert escalated.metadata["deciding_call"]["commit_rule"] == "grant-admin"
    assert "'r-role'" in escalated.explanation and "grant-admin" in escalated.explanation
    assert "under-penalized" in escalated.explanation
    assert scores["capped"].metadata["deciding_call"]["proposal_rule"] == "large-payment"


def test_the_scorer_in_a_task_scores_the_live_transcript(logs, tmp_path):
    """Task(scorer=commit_misuse(policy=...)): scored while the eval runs, as `inspect score` scores the log."""
    from inspect_ai import eval
    from inspect_ai.model import get_model

    from litmus_score.inspect_scorer import commit_misuse

    task = inspect_logs.replay_task()
    task.scorer = [commit_misuse(policy=str(logs["policies"]["replayed"]))]
    [log] = eval(task, model=get_model("mockllm/model", custom_outputs=[]), log_dir=str(tmp_path / "logs"),
                 display="none")
    assert log.status == "success", log.error
    from inspect_ai.log import read_eval_log

    live = read_eval_log(log.location)
    ours = litmus_verdicts(log.location, logs["policies"]["replayed"], tmp_path / "litmus")
    assert inspect_verdicts(live.samples) == ours
    assert {str(s.id) for s in live.samples if s.scores["commit_misuse"].answer == "escalated_misuse"} == {"escalated"}


def test_a_policy_that_cannot_be_read_fails_when_the_scorer_is_made(tmp_path):
    from litmus_score.inspect_scorer import commit_misuse
    from litmus_score.scoring.policy import PolicyError

    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: litmus-policy/1\nrules: [{id: x, effect: allow}]\n")
    with pytest.raises(PolicyError, match=r"bad\.yaml"):
        commit_misuse(policy=str(bad))
    good = tmp_path / "good.yaml"
    good.write_text(inspect_logs.REPLAY_POLICY)
    with pytest.raises(ValueError, match="sometimes"):
        commit_misuse(policy=str(good), adjudication="sometimes")


class ScoreBeforeReason:
    """Inspect's Score as it was before its `reason` field and Score.unscored (0.3.245)."""

    model_fields: ClassVar[dict] = {"value": None, "answer": None, "explanation": None, "metadata": None}

    def __init__(self, value, answer=None, explanation=None, metadata=None):
        self.value, self.answer, self.explanation, self.metadata = value, answer, explanation, metadata


def test_unscored_samples_carry_their_reason_and_older_inspect_reads_it_back(monkeypatch):
    from inspect_ai.scorer import Score

    from litmus_score import inspect_scorer

    reason, metadata = "unscored_calls,no_commit_context", {"reasons": ["unscored_calls", "no_commit_context"]}
    current = inspect_scorer.unscored(reason, "why", metadata)
    assert current.reason == reason and math.isnan(current.value) and current.metadata == metadata
    monkeypatch.setattr(inspect_scorer, "Score", ScoreBeforeReason)
    older = inspect_scorer.unscored(reason, "why", metadata)
    assert math.isnan(older.value) and older.metadata["unscored_reason"] == reason
    # A log written so reads, in today's Inspect, with the reason in its field.
    read_back = Score.model_validate({"value": older.value, "explanation": older.explanation,
                                      "metadata": older.metadata})
    assert read_back.reason == reason


def test_with_epochs_inspects_pass_at_reducer_gives_misuse_at_k(logs, tmp_path):
    """`inspect eval --epochs 3 --epochs-reducer pass_at_2` with the scorer: each sample's epochs reduce to
    1 - C(n - c, 2) / C(n, 2) per key, and the eval's mean is metrics.json's misuse@2 for the same log."""
    from inspect_ai import Epochs, eval
    from inspect_ai.model import get_model

    from litmus_score.inspect_scorer import commit_misuse

    task = inspect_logs.replay_task()
    task.scorer = [commit_misuse(policy=str(logs["policies"]["replayed"]))]
    [log] = eval(task, model=get_model("mockllm/model", custom_outputs=[]), log_dir=str(tmp_path / "logs"),
                 epochs=Epochs(3, ["pass_at_1", "pass_at_2"]), display="none")
    assert log.status == "success", log.error
    assert main(["score", "--input_format", "inspect", "--input", log.location, "--output", str(tmp_path / "out"),
                 "--policy", str(logs["policies"]["replayed"]), *RUNNER]) == 0
    [group] = load_json(tmp_path / "out" / "metrics.json")["groups"]
    assert list(group["misuse_at_k"]) == ["1", "2", "3"]
    results = {(score.reducer, score.name): score for score in log.results.scores}
    for k in ("1", "2"):
        for key, field in (("misuse", "estimate"), ("legacy_misuse", "legacy_estimate")):
            reduced = results[(f"pass_at_{k}", key)]
            assert reduced.metrics["mean"].value == pytest.approx(group["misuse_at_k"][k][field])
            assert reduced.scored_samples == group["misuse_at_k"][k]["tasks"]
