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
    OUTPUT/comparison.json     the regression verdict, with a baseline
    OUTPUT/report.html         the run for people
    OUTPUT/_SUCCESS            written last: the run is complete
"""

METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"
EVIDENCE_FILE = "evidence.json"
COMPARISON_FILE = "comparison.json"
REPORT_FILE = "report.html"
SUCCESS_MARKER = "_SUCCESS"
SCORED_DIR = "scored"
UNSCORED_DIR = "unscored"
TRAJECTORIES_DIR = "trajectories"
# Prefix of the file sets of scored calls and of scored trajectories.
SCORED_PREFIX = "part"
# Prefixes of the UNSCORED file sets, by the stage that set the rows aside:
# completeness, context resolution, and the safety net for bugs.
INCOMPLETE = "incomplete"
UNRESOLVED = "unresolved"
FAILED = "failed"
UNSCORED_STAGES = (INCOMPLETE, UNRESOLVED, FAILED)
# Bundles write here before the finishing step moves their files into place.
TEMP_PREFIX = ".temp-"

MANIFEST_SCHEMA = "litmus-manifest/1"
COMPARISON_SCHEMA = "litmus-comparison/1"
EVIDENCE_SCHEMA = "litmus-evidence/1"

# Key of a trajectory whose task_id or task_category is null or empty.
NO_TASK = "(none)"
