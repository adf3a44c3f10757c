"""`litmus-score nightly`: one command a night.

    litmus-score nightly --date 2026-12-01 --input 'runs/{date}/*.parquet' --output-root scores/ [score's flags]

scores into OUTPUT_ROOT/date=2026-12-01/ with, as the baseline, the latest
earlier night under the root that is complete and scored in the same mode.
Re-running a night replaces that night's own earlier attempt, complete or
not (the manifest records the night and its inputs); the folder of another
night is never written over, and one scored from other inputs only with
--replace.
"""

from __future__ import annotations

import argparse
from datetime import date as Date

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.flags import check_flags
from pipeline.options import ScoreOptions, UsageError
from pipeline.publish import PublishError, completed_subfolders, read_run
from litmus_score.scoring import contract as c
from litmus_score.scoring.layout import NIGHT_PREFIX

# Chosen by `nightly` itself.
_CHOSEN = ("--output", "--baseline")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _parser() -> _Parser:
    parser = _Parser(prog="litmus-score nightly", allow_abbrev=False, add_help=False,
                     description="Score one night into OUTPUT_ROOT/date=DATE/ and compare it with the latest "
                                 "earlier complete night; other flags are score's (litmus-score score --help).")
    parser.add_argument("--date", help="the night, YYYY-MM-DD (required)")
    parser.add_argument("--input", dest="inputs", action="append",
                        help="Parquet path or glob; {date} stands for --date; repeat for several (required)")
    parser.add_argument("--output-root", help="folder of the nights' outputs: local, gs://, ... (required)")
    parser.add_argument("-h", "--help", action="store_true")
    return parser


def night_date(text: str) -> str:
    """`text` if it is a calendar date written YYYY-MM-DD, else UsageError."""
    try:
        if len(text) == 10 and Date.fromisoformat(text).isoformat() == text:
            return text
    except ValueError:
        pass
    raise UsageError(f"--date must be a date written YYYY-MM-DD, got {text!r}")


def find_baseline(root: str, date: str, mode: str):
    """The folder of the latest night before `date` under `root` that is a
    complete run scored in `mode`, or None."""
    earlier = []
    for name in completed_subfolders(root, NIGHT_PREFIX):
        day = name[len(NIGHT_PREFIX):]
        try:
            if night_date(day) < date:
                earlier.append(day)
        except UsageError:  # not a night's folder
            continue
    for day in sorted(earlier, reverse=True):
        folder = FileSystems.join(root, NIGHT_PREFIX + day)
        try:
            metrics, _ = read_run(folder)
        except PublishError:
            continue
        if metrics.get("adjudication") == mode:
            return folder
    return None


def plan(argv):
    """(score's argv, the night, the baseline folder or None, the output root); None after --help; UsageError."""
    parser = _parser()
    args, rest = parser.parse_known_args(list(argv))
    if args.help:
        parser.print_help()
        return None
    for flag in _CHOSEN:
        if any(arg.split("=", 1)[0] == flag for arg in rest):
            raise UsageError(f"nightly chooses {flag} itself (under --output-root); drop it")
    check_flags(rest, [flag for action in parser._actions for flag in action.option_strings])
    for flag, value in (("--date", args.date), ("--input", args.inputs), ("--output-root", args.output_root)):
        if not value:
            raise UsageError(f"{flag} is required (litmus-score nightly --help)")
    date = night_date(args.date)
    try:
        mode = c.check_mode(PipelineOptions(rest).view_as(ScoreOptions).adjudication)
    except ValueError as error:
        raise UsageError(str(error)) from None
    inputs = [pattern.replace("{date}", date) for pattern in args.inputs]
    root = args.output_root.rstrip("/") or "/"
    baseline = find_baseline(root, date, mode)
    score_argv = [*(part for pattern in inputs for part in ("--input", pattern)),
                  "--output", FileSystems.join(root, NIGHT_PREFIX + date),
                  *(["--baseline", baseline] if baseline else []), *rest]
    return score_argv, {"date": date, "inputs": inputs}, baseline, root
