"""`litmus-score nightly`: one command a night.

    litmus-score nightly --date 2026-12-01 --input 'runs/{date}/*.parquet' --output_root scores/ [score's flags]

scores into OUTPUT_ROOT/date=2026-12-01/ with, as the baseline, the latest
earlier night under the root that is complete (read when the night starts;
scored under other rules, its inputs are scored again under tonight's:
pipeline.rescore).
Re-running a night replaces that night's own earlier attempt, complete or
not (the manifest records the night and its inputs); the folder of another
night is never written over, and one scored from other inputs only with
--replace. With --input_format the inputs are logs, imported and scored in
one job (pipeline.imports.score_logs).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime

from apache_beam.io.filesystems import FileSystems

from litmus_score import text
from litmus_score.exits import Exit
from litmus_score.importers import FORMATS
from litmus_score.scoring.layout import NIGHT_PREFIX
from pipeline.flags import beam_options, check_flags
from pipeline.imports import add_import_flags, score_logs
from pipeline.nights import night_folders, read_night
from pipeline.options import UsageError, folder_name, validate
from pipeline.publish import PublishError, Run

# Chosen by `nightly` itself.
_CHOSEN = ("--output", "--baseline")
# Exit codes of a night that was published.
PUBLISHED = (Exit.OK, Exit.REGRESSION, Exit.INCOMPLETE_INPUT, Exit.WITHHELD)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _parser() -> _Parser:
    parser = _Parser(prog="litmus-score nightly", allow_abbrev=False, add_help=False,
                     description="Score one night into OUTPUT_ROOT/date=DATE/ and compare it with the latest "
                                 "earlier complete night; other flags are score's (litmus-score score --help).")
    parser.add_argument("--date", help="the night, YYYY-MM-DD (required)")
    parser.add_argument("--input", dest="inputs", action="append",
                        help="Parquet path or glob (logs with --input_format); {date} stands for --date; repeat for "
                             "several (required)")
    parser.add_argument("--input_format", "--input-format", choices=FORMATS, default=None,
                        help="the inputs are logs of this format: imported and scored in one job (as score "
                             "--input_format)")
    add_import_flags(parser)
    parser.add_argument("--output_root", "--output-root", dest="output_root",
                        help="folder of the nights' outputs: local, gs://, ... (required)")
    parser.add_argument("-h", "--help", action="store_true")
    return parser


def night_date(value: str) -> str:
    """`value` if it is a calendar date written YYYY-MM-DD, else UsageError."""
    try:
        if len(value) == 10 and datetime.date.fromisoformat(value).isoformat() == value:
            return value
    except ValueError:
        pass
    raise UsageError(f"--date must be a date written YYYY-MM-DD, got {value!r}")


def find_baseline(root: str, date: str) -> Run | None:
    """The latest night before `date` under `root` (pipeline.nights: what
    `trend` takes for a night too), read now (pinned), or None. Its rules
    need not be tonight's: when they differ its inputs are scored again
    under tonight's (docs/nightly.md)."""
    for day, name in reversed(night_folders(root)):
        if day >= date:
            continue
        try:
            return read_night(root, name)
        except PublishError as error:
            print(f"litmus-score nightly: {name} is no baseline: {text.shown(error)}")
    return None


def plan(argv):
    """(the run's config, the night, the pinned baseline or None, the output root, the parsed nightly
    flags); None after --help; UsageError."""
    parser = _parser()
    args, rest = parser.parse_known_args(list(argv))
    if args.help:
        parser.print_help()
        return None
    for flag in _CHOSEN:
        if any(arg.split("=", 1)[0] == flag for arg in rest):
            raise UsageError(f"nightly chooses {flag} itself (under --output_root); drop it")
    check_flags(rest, [flag for action in parser._actions for flag in action.option_strings])
    for flag, value in (("--date", args.date), ("--input", args.inputs), ("--output_root", args.output_root)):
        if not value:
            raise UsageError(f"{flag} is required (litmus-score nightly --help)")
    date = night_date(args.date)
    inputs = [pattern.replace("{date}", date) for pattern in args.inputs]
    root = folder_name(args.output_root)
    output = FileSystems.join(root, NIGHT_PREFIX + date)
    night = {"date": date, "inputs": inputs}
    if args.input_format:
        night["input_format"] = args.input_format
        args.inputs = inputs
    config = validate(beam_options(rest, inputs=inputs, output=output))
    baseline = find_baseline(root, date)
    if baseline is not None:
        config = dataclasses.replace(config, baseline=baseline.folder)
    return config, night, baseline, root, args


def main(argv) -> Exit:
    """`litmus-score nightly`: scores one night against the latest earlier complete night."""
    from pipeline import job

    try:
        planned = plan(argv)
    except UsageError as error:
        text.error(error)
        return Exit.USAGE
    if planned is None:  # --help
        return Exit.OK
    config, night, baseline, root, args = planned
    print(f"litmus-score nightly {night['date']}: baseline "
          + (text.shown(baseline.folder) if baseline else "none (no earlier complete night)"))
    if args.input_format:
        code = score_logs(args, config, baseline, night)
    else:
        code = job.run(config, baseline, night)
    if code in PUBLISHED:
        after_publishing(root)
    return code


def after_publishing(root: str) -> None:
    """What follows a night published under `root`: the history of nights is refreshed."""
    from pipeline.trend import refresh

    refresh(root)
