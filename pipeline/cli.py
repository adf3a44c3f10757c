"""litmus-score command line: score, nightly, trend, whatif, import, compare, show, audit, generate, demo, policy check.

Each command parses its own flags and calls a function with a typed config
(pipeline.job, pipeline.nightly, pipeline.imports); the exit codes are
litmus_score.exits' (docs/commands.md has the table).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from litmus_score import text
from litmus_score.exits import Exit, Terminated, of_stop, stop_name
from pipeline.processes import allocators_from_the_start
from pipeline.supervise import supervise, supervised

DEMO_MARKER = ".litmus-demo"
DEMO_OUTPUT = "litmus-demo"


def score(argv) -> Exit:
    """Runs the scoring job; argv holds litmus-score's flags and Beam's."""
    if any(arg.split("=")[0] in ("--input_format", "--input-format") for arg in argv):
        from pipeline.imports import import_and_score

        return import_and_score(argv)
    if any(arg in ("-h", "--help") for arg in argv):
        from pipeline.options import ScoreOptions

        parser = argparse.ArgumentParser(
            prog="litmus-score score", description="Score trajectory shards; other flags go to Beam."
        )
        ScoreOptions._add_argparse_args(parser)
        parser.print_help()
        return Exit.OK
    from pipeline import job
    from pipeline.options import UsageError
    from pipeline.publish import PublishError

    try:
        config, baseline = job.configure(argv)
    except (UsageError, PublishError) as error:
        text.error(error)
        return Exit.USAGE
    return job.run(config, baseline)


def nightly(argv) -> Exit:
    from pipeline.nightly import main as run_nightly

    return run_nightly(argv)


def compare(argv) -> Exit:
    """Compares two finished runs into a folder of its own: comparison.json,
    the newer run's report against the older, and a manifest naming both.
    Neither run is modified."""
    parser = argparse.ArgumentParser(prog="litmus-score compare",
                                     description="Compare a run with a baseline run (exit 3 on a regression) "
                                                 "into a new folder.")
    parser.add_argument("new", help="output folder of the newer run")
    parser.add_argument("old", help="output folder of the baseline run")
    parser.add_argument("--output", required=True, help="folder for the comparison and its report: new or empty")
    parser.add_argument("--thresholds", help="regression thresholds YAML (default: configs/thresholds.yaml's values)")
    parser.add_argument("--replace", action="store_true", help="replace an earlier comparison in --output")
    args = parser.parse_args(argv)

    from pipeline import job, publish
    from pipeline.options import UsageError, folder_name, load_thresholds_file, refuse_nested

    output = folder_name(args.output)
    try:
        thresholds = load_thresholds_file(args.thresholds) if args.thresholds else None
        for role, folder in (("new run", args.new), ("baseline", args.old)):
            refuse_nested(output, folder, role)
        new, old = publish.pin_run(args.new, "new run"), publish.pin_run(args.old)
        comparison = job.compare_with(old, new.metrics, thresholds, new.policy)
        lock = publish.claim(output, args.replace, kind=publish.COMPARISON)
    except (UsageError, ValueError) as error:  # PublishError, a malformed metrics document
        text.error(error)
        return Exit.USAGE
    try:
        with job.publishing(output):
            documents = job.report_documents(new.folder, new.metrics, new.manifest, comparison)
            publish.publish(output, job.comparison_manifest(new, old), documents)
    except job.Failed as failed:
        text.error(f"{failed}; the comparison was not published")
        return Exit.FAILED
    finally:
        lock.release()
    print("\n".join(job.comparison_lines(comparison)))
    print(f"wrote {output}/ (comparison.json, report.html, manifest.json)")
    return Exit(comparison["exit_code"])


def policy(argv) -> Exit:
    parser = argparse.ArgumentParser(prog="litmus-score policy", description="Policy files.")
    commands = parser.add_subparsers(dest="policy_command", required=True)
    commands.add_parser("check", help="validate a policy file and print its hash").add_argument("file")
    args = parser.parse_args(argv)

    from pipeline.options import UsageError, load_policy_file

    try:
        document = load_policy_file(args.file)
    except UsageError as error:
        text.error(error)
        return Exit.USAGE
    print(f"{text.shown(args.file)}: valid, sha256 {document.sha256}")
    return Exit.OK


def generate(argv) -> Exit:
    parser = argparse.ArgumentParser(prog="litmus-score generate",
                                     description="Write synthetic shards that follow the contract.")
    parser.add_argument("--output", required=True)
    parser.add_argument("--trajectories", type=int, default=None, help="default 1000 (reference-1200: 1200)")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default="mixed", help="mixed or reference-1200")
    parser.add_argument("--plant_misuse", "--plant-misuse", action="append", default=[], metavar="AGENT=FACTOR",
                        help="multiply an agent's propensity for misuse (plants a regression); repeatable")
    args = parser.parse_args(argv)

    from litmus_score.synthetic import generate as write_shards

    try:
        factors = {}
        for planted in args.plant_misuse:
            agent, _, factor = planted.partition("=")
            factors[agent] = float(factor)
        paths = write_shards(args.output, args.trajectories, args.shards, args.seed, args.profile, factors)
    except (ValueError, FileExistsError) as error:
        text.error(error)
        return Exit.USAGE
    except OSError as error:  # a read-only or full disk
        text.error(f"cannot write {args.output}: {error.strerror}")
        return Exit.FAILED
    print(f"wrote {len(paths)} shard(s) to {args.output}")
    return Exit.OK


def demo(argv) -> Exit:
    """Generate the reference-1200 data, score it, print the summary."""
    parser = argparse.ArgumentParser(prog="litmus-score demo",
                                     description="Generate the reference-1200 data, score it, summarize; "
                                                 "other flags go to Beam.")
    parser.add_argument("--output", default=DEMO_OUTPUT, help=f"demo folder (default ./{DEMO_OUTPUT})")
    parser.add_argument("--seed", type=int, default=0)
    args, beam_args = parser.parse_known_args(argv)

    from litmus_score.synthetic import generate as write_shards
    from pipeline import job
    from pipeline.options import UsageError

    folder = Path(args.output)
    try:
        config, _ = job.configure(beam_args, inputs=[str(folder / "shards" / "*.parquet")], output=str(folder / "out"))
    except UsageError as error:
        text.error(error)
        return Exit.USAGE
    if folder.exists() and any(folder.iterdir()):
        if not (folder / DEMO_MARKER).exists():
            text.error(f"{folder} exists and is not a demo folder; choose another --output")
            return Exit.USAGE
        shutil.rmtree(folder)  # an earlier demo's own folder
    folder.mkdir(parents=True)
    (folder / DEMO_MARKER).write_text("made by `litmus-score demo`; safe to delete\n")
    write_shards(str(folder / "shards"), shards=4, seed=args.seed, profile="reference-1200")
    return job.run(config)


def whatif(argv) -> Exit:
    from pipeline.whatif import main as run_whatif

    return run_whatif(argv)


def audit(argv) -> Exit:
    from pipeline.audit import main as run_audit

    return run_audit(argv)


def show(argv) -> Exit:
    from pipeline.show import main as run_show

    return run_show(argv)


def trend(argv) -> Exit:
    from pipeline.trend import main as run_trend

    return run_trend(argv)


def import_logs(argv) -> Exit:
    from pipeline.imports import import_command

    return import_command(argv)


class Command(NamedTuple):
    run: Callable[[list], int]
    help: str


# Each command parses its own flags (`litmus-score COMMAND --help`).
COMMANDS = {
    "score": Command(score, "score shards (flags: litmus-score score --help)"),
    "nightly": Command(nightly, "score one night under a root, against the last complete night"),
    "trend": Command(trend, "the history of nights under an output root: trend.json, trend.html"),
    "whatif": Command(whatif, "score one corpus under a base policy and candidates in one job: what each flips"),
    "compare": Command(compare, "compare a run with a baseline run (exit 3 on a regression)"),
    "show": Command(show, "one trajectory of a run, call by call"),
    "audit": Command(audit, "per tool: does proposal-time scoring hold?"),
    "import": Command(import_logs, "import agent logs into shards (litmus-score import FORMAT --help)"),
    "generate": Command(generate, "write synthetic shards that follow the contract"),
    "demo": Command(demo, "generate the reference-1200 data, score it, summarize"),
    "policy": Command(policy, "policy files: litmus-score policy check FILE"),
}


def _raise_terminated(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def _signals_as_exceptions():
    """SIGTERM raises Terminated in the main thread while a command runs, as
    SIGINT raises KeyboardInterrupt: the command releases its lock and says
    what it stopped. (A supervised child stops at once instead: pipeline.supervise.)"""
    if threading.current_thread() is not threading.main_thread() or supervised():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _NotActionable(logging.Filter):
    """Beam 2.77 warns, whenever it is imported, that its BigQuery clients
    (apitools) are missing: on runs that never touch BigQuery, nothing a user
    can act on. Installing `litmus-score[gcp]` brings them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("apitools not found")


_NOT_ACTIONABLE = _NotActionable()


class _SaidOnce(logging.Filter):
    """A bundle that failed is logged by Beam where it failed, with its
    traceback, once per step it passed through; the command says what
    failed in one line (pipeline.job.execute)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR
                    and record.name in ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker"))


_SAID_ONCE = _SaidOnce()


def _log_escaped() -> None:
    """Log records (Beam's, and the stages' warnings naming shard files) reach
    stderr through the printable-text path, in the format of Python's default
    handler (which importing Beam may already have installed)."""
    root = logging.getLogger()
    terminal = [handler for handler in root.handlers
                if type(handler) is logging.StreamHandler and handler.stream is sys.stderr]
    if not root.handlers:
        terminal = [logging.StreamHandler()]
        root.addHandler(terminal[0])
    for handler in terminal:
        handler.setFormatter(text.EscapingFormatter(logging.BASIC_FORMAT))
        handler.addFilter(_NOT_ACTIONABLE)
        handler.addFilter(_SAID_ONCE)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    _log_escaped()
    with _signals_as_exceptions(), text.escaped_terminal():
        try:
            if argv and argv[0] in COMMANDS:
                return int(COMMANDS[argv[0]].run(argv[1:]))
            parser = argparse.ArgumentParser(prog="litmus-score", description=__doc__.split("\n")[0])
            commands = parser.add_subparsers(dest="command", required=True)
            for name, command in COMMANDS.items():
                commands.add_parser(name, help=command.help, add_help=False)
            args, rest = parser.parse_known_args(argv)  # --help, or no command: argparse's message and exit
            return int(COMMANDS[args.command].run(rest))
        except (KeyboardInterrupt, Terminated) as stop:
            text.error(stop_name(stop))
            return int(of_stop(stop))


def entry_point(argv=None) -> None:
    """`litmus-score`, `python -m pipeline` and the deploy/ entry points: main()
    in a child process this one supervises (pipeline.supervise); what either
    prints, a traceback of the child included, escaped (litmus_score.text)."""
    allocators_from_the_start()
    with text.escaped_terminal():
        code = supervise(lambda: main(argv))
    sys.exit(code)


if __name__ == "__main__":
    entry_point()
