"""Stage 6: write a run's outputs into its own folder.

    OUTPUT/metrics.json     run-level metrics (scoring-v1), sorted keys
    OUTPUT/manifest.json    what was read and how
    OUTPUT/scored/*.parquet one row per scored call
    OUTPUT/unscored/*.parquet one row per unscored trajectory, input row kept;
                            files named by the stage that set them aside
"""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms import schema as s

METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"
SCORED_DIR = "scored"
UNSCORED_DIR = "unscored"


def to_json(document) -> str:
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_text(path: str, text: str) -> None:
    with FileSystems.create(path) as handle:
        handle.write(text.encode("utf-8"))


def manifest_document(reports, header: dict) -> dict:
    """The manifest: `header` (options, versions) plus the shard reports, sorted by file."""
    files = sorted(reports, key=lambda report: report["file"])
    return {
        **header,
        "inputs": files,
        "input_rows": sum(report["rows_read"] for report in files),
        "unreadable_files": [report["file"] for report in files if report["error"]],
    }


class WriteOutputs(beam.PTransform):
    """Writes scored and UNSCORED tables, metrics and the manifest under `output`.

    Takes a dict of PCollections: scored (pa.Tables), unscored (a dict of
    name -> PCollection of pa.Tables, one file set per name), metrics (one
    document) and shard_reports (one dict per input file).
    """

    def __init__(self, output: str, manifest_header: dict):
        super().__init__()
        self._output = output.rstrip("/")
        self._header = manifest_header

    def _path(self, *parts: str) -> str:
        return FileSystems.join(self._output, *parts)

    def expand(self, outputs):
        header = self._header
        outputs["scored"] | "Write scored calls" >> beam.io.WriteToParquetBatched(
            self._path(SCORED_DIR, "part"), schema=s.SCORED, codec="snappy", file_name_suffix=".parquet"
        )
        for name, records in outputs["unscored"].items():
            records | f"Write {name} unscored trajectories" >> beam.io.WriteToParquetBatched(
                self._path(UNSCORED_DIR, name), schema=s.UNSCORED, codec="snappy", file_name_suffix=".parquet"
            )
        metrics_path, manifest_path = self._path(METRICS_FILE), self._path(MANIFEST_FILE)
        outputs["metrics"] | "Write metrics.json" >> beam.Map(lambda doc: write_text(metrics_path, to_json(doc)))
        return (
            outputs["shard_reports"]
            | "Collect shard reports" >> beam.combiners.ToList()
            | "Write manifest.json"
            >> beam.Map(lambda reports: write_text(manifest_path, to_json(manifest_document(reports, header))))
        )
