"""The layout of a run's output folder: every file and folder name, and the
schema ids of the documents in it.

The writer, the launcher, `compare`, the report and every reader of a run
take the names from here, so the layout is stated once.

    OUTPUT/metrics.json        run-level metrics (scoring-v1)
    OUTPUT/manifest.json       what was read, how, and every file written
    OUTPUT/evidence.json       per group, the first over-/under-penalized and
                               execution-hallucination cases, deciding call
    OUTPUT/scored/             one row per scored call
    OUTPUT/trajectories/       one row per scored trajectory, with its verdicts
    OUTPUT/unscored/           one row per unscored trajectory; files named
                               by the stage that set the rows aside
    OUTPUT/policy.json         the validated policy the run was scored under
                               (canonical JSON: its sha256 is the run's
                               policy_sha256); absent without --policy
    OUTPUT/policy.yaml         the policy file's text as the run read it
    OUTPUT/comparison.json     the regression verdict, with a baseline
    OUTPUT/report.html         the run for people
    OUTPUT/_SUCCESS            written last: the run is complete
    OUTPUT/.lock               held while a run writes the folder

A run is complete when _SUCCESS exists beside a valid manifest.json; the
files its manifest lists are the run, whatever else the folder holds.
"""

METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"
EVIDENCE_FILE = "evidence.json"
COMPARISON_FILE = "comparison.json"
POLICY_FILE = "policy.json"
POLICY_SOURCE_FILE = "policy.yaml"
REPORT_FILE = "report.html"
SUCCESS_MARKER = "_SUCCESS"
SCORED_DIR = "scored"
UNSCORED_DIR = "unscored"
TRAJECTORIES_DIR = "trajectories"
# Prefix of the file sets of scored calls and of scored trajectories.
SCORED_PREFIX = "part"
# Prefixes of the UNSCORED file sets, by the stage that set the rows aside:
# duplicates, completeness, context resolution, and the safety net for bugs.
DUPLICATE = "duplicate"
INCOMPLETE = "incomplete"
UNRESOLVED = "unresolved"
FAILED = "failed"
# An import's entries of its logs that became no trajectory (an import's own
# folder, or a run that imported its logs itself).
UNMAPPED_DIR = "unmapped"
# Where `score --input_format` kept its import before it imported and scored
# in one job: a run's folder written then holds it, and --replace deletes it.
IMPORTED_DIR = "imported"
# Bundles write here before the finishing step moves their files into place.
TEMP_PREFIX = ".temp-"
# metrics.json, manifest.json, ... are written under this prefix, then renamed.
PARTIAL_PREFIX = ".partial-"
# Created exclusively by the run that writes the folder; records its pid and host.
LOCK_FILE = ".lock"
# `nightly` scores each night into OUTPUT_ROOT/date=YYYY-MM-DD/.
NIGHT_PREFIX = "date="

# Every Parquet file litmus-score writes says what it is under this key of
# its key-value metadata: the folder it was written for (scored,
# trajectories, unscored; an import's unmapped), or SHARD_KIND for an
# import's trajectory shards. Only a shard is read as input.
OUTPUT_KIND_KEY = "litmus_score.output"
SHARD_KIND = "trajectory_shard"
# An import is finished once this is written beside its trajectories/ folder:
# until then its shards are no input.
IMPORT_MANIFEST_FILE = "import-manifest.json"

MANIFEST_SCHEMA = "litmus-manifest/1"
COMPARISON_SCHEMA = "litmus-comparison/1"
# The manifest of `compare`'s own folder (comparison.json, report.html): not a run.
COMPARISON_MANIFEST_SCHEMA = "litmus-comparison-manifest/1"
EVIDENCE_SCHEMA = "litmus-evidence/1"

# Slice keys: a trajectory whose task_id or task_category is null or empty,
# and the names a slice sums together beyond its bound (--max_slice_keys).
NO_TASK = "(none)"
OTHER = "(other)"

# `whatif`'s folder: OUTPUT/<policy name>/metrics.json (and policy.json) per
# policy, OUTPUT/whatif.json, the manifest, _SUCCESS.
WHATIF_FILE = "whatif.json"
WHATIF_SCHEMA = "litmus-whatif/1"
WHATIF_MANIFEST_SCHEMA = "litmus-whatif-manifest/1"
