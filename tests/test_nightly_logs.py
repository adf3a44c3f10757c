"""`litmus-score nightly --input_format FORMAT`: a night of logs is imported
and scored in one job, under the night's lock, as `score --input_format`
scores them; the Flex Template does the same."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import RUNNER
from tests.importers_support import load_json, require

require("pydantic_ai")
require("opentelemetry.proto")
from pipeline.cli import main  # noqa: E402
from tests import otel_logs  # noqa: E402  (needs the OTel SDK and pydantic-ai)
from tests.test_import_otel import POLICY  # noqa: E402

pytestmark = pytest.mark.slow
NIGHTS = ("2026-11-30", "2026-12-01")


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """logs/DATE/traces.jsonl for each night, and the policy that decides their calls."""
    folder = tmp_path_factory.mktemp("nightly-logs")
    trace = otel_logs.write_trace_file(folder / "traces.jsonl")
    for date in NIGHTS:
        (folder / "logs" / date).mkdir(parents=True)
        shutil.copy(trace, folder / "logs" / date / "traces.jsonl")
    (folder / "policy.yaml").write_text(POLICY)
    return folder


def nightly(logs, root, date, *flags):
    return main(["nightly", "--date", date, "--input_format", "otel", "--input",
                 str(logs / "logs" / "{date}" / "*.jsonl"), "--output_root", str(root),
                 "--policy", str(logs / "policy.yaml"), *flags, *RUNNER])


def test_nightly_imports_a_nights_logs_and_scores_them_as_score_does(logs, tmp_path):
    root = tmp_path / "nights"
    assert nightly(logs, root, NIGHTS[0]) == 0
    night = root / f"date={NIGHTS[0]}"
    manifest = load_json(night / "manifest.json")
    assert manifest["night"] == {"date": NIGHTS[0], "inputs": [str(logs / "logs" / NIGHTS[0] / "*.jsonl")],
                                 "input_format": "otel"}
    assert [report["file"] for report in manifest["import"]["files"]] == [
        str(logs / "logs" / NIGHTS[0] / "traces.jsonl")]
    # The same logs through `score --input_format`: the same metrics, byte for byte.
    scored = tmp_path / "scored"
    assert main(["score", "--input_format", "otel", "--input", str(logs / "logs" / NIGHTS[0] / "*.jsonl"),
                 "--output", str(scored), "--policy", str(logs / "policy.yaml"), *RUNNER]) == 0
    assert (night / "metrics.json").read_bytes() == (scored / "metrics.json").read_bytes()
    # The next night is compared with it; a re-run of a night replaces its own attempt.
    assert nightly(logs, root, NIGHTS[1]) == 0
    assert load_json(root / f"date={NIGHTS[1]}" / "comparison.json")["baseline"]["folder"].endswith(f"date={NIGHTS[0]}")
    assert nightly(logs, root, NIGHTS[1]) == 0


@pytest.mark.parametrize("command", ["score", "nightly"])
def test_the_template_scores_logs_in_the_job_it_submits(logs, tmp_path, command):
    """input_format: the launcher submits one job, which imports, scores and publishes itself."""
    from pipeline import template

    if command == "nightly":
        where = ["--date", NIGHTS[0], "--input", str(logs / "logs" / "{date}" / "*.jsonl"),
                 "--output_root", str(tmp_path / "nights")]
        out = tmp_path / "nights" / f"date={NIGHTS[0]}"
    else:
        out = tmp_path / "out"
        where = ["--input", str(logs / "logs" / NIGHTS[0] / "*.jsonl"), f"--output={out}"]
    deployed = {template.DEPLOYED_OPTIONS: json.dumps({"runner": RUNNER[1]})}  # the image's, never a parameter
    assert template.main([f"--command={command}", "--input_format=otel", *where,
                          f"--policy={logs / 'policy.yaml'}"], deployed) == 0
    assert (out / "_SUCCESS").exists() and not (out / ".lock").exists()
    manifest = load_json(out / "manifest.json")
    assert manifest["import"]["format"] == "otel" and manifest["input_rows"] > 0
    assert [report["file"] for report in manifest["inputs"]] == [str(logs / "logs" / NIGHTS[0] / "traces.jsonl")]


def test_a_night_of_logs_under_other_rules_is_compared_with_its_baseline_imported_again(logs, tmp_path, capsys):
    """Tonight's mode differs from the baseline's: the baseline's logs, unchanged, are imported and
    scored again under tonight's rules, as its manifest's import says, and compared with that."""
    root = tmp_path / "nights"
    assert nightly(logs, root, NIGHTS[0]) == 0
    assert nightly(logs, root, NIGHTS[1], "--adjudication", "proposal") == 0
    assert "no verdict across the change of rules" not in capsys.readouterr().err
    comparison = load_json(root / f"date={NIGHTS[1]}" / "comparison.json")
    assert comparison["baseline"]["rescored"]["scored_under"]["adjudication"] == "commit"
    assert not comparison["withheld"]
