"""`litmus-score nightly --input_format FORMAT`: a night of logs is imported
into the night's imported/ and scored, under the night's lock, as `score
--input_format` scores them."""

from __future__ import annotations

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
    imported = load_json(night / "imported" / "import-manifest.json")
    assert [report["file"] for report in imported["files"]] == [str(logs / "logs" / NIGHTS[0] / "traces.jsonl")]
    # The same logs through `score --input_format`: the same metrics, byte for byte.
    scored = tmp_path / "scored"
    assert main(["score", "--input_format", "otel", "--input", str(logs / "logs" / NIGHTS[0] / "*.jsonl"),
                 "--output", str(scored), "--policy", str(logs / "policy.yaml"), *RUNNER]) == 0
    assert (night / "metrics.json").read_bytes() == (scored / "metrics.json").read_bytes()
    # The next night is compared with it; a re-run of a night replaces its own attempt.
    assert nightly(logs, root, NIGHTS[1]) == 0
    assert load_json(root / f"date={NIGHTS[1]}" / "comparison.json")["baseline"]["folder"].endswith(f"date={NIGHTS[0]}")
    assert nightly(logs, root, NIGHTS[1]) == 0


def test_the_template_refuses_logs_naming_the_import(capsys):
    from pipeline import template

    assert template.main(["--command=nightly", "--input_format=otel", "--date", NIGHTS[0],
                          "--input", "gs://b/{date}/*.jsonl", "--output_root", "gs://b/nights"]) == 2
    assert "import the logs first" in capsys.readouterr().err
