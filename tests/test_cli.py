"""End to end through the command line: generate -> score -> outputs."""

import itertools
import json
import random
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from pipeline.cli import main
from pipeline.options import (
    MAX_LOCAL_WORKERS,
    SMALL_INPUT_BYTES,
    THREADED_RUNNER,
    fit_local_workers,
    with_local_parallelism,
)
from tests import builders as b
from tests.conftest import RUNNER, load_json
from transforms import schema as s

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("generated")
    assert main(["generate", "--output", str(folder), "--trajectories", "3000", "--shards", "3", "--seed", "7"]) == 0
    return folder


def group_fields(doc):
    return doc["trajectories"], doc["calls"]


@pytest.mark.parametrize("mode", ["commit", "strict", "proposal"])
def test_every_trajectory_and_call_is_accounted_for(generated, score_cli, mode):
    code, out = score_cli([generated / "*.parquet"], "--adjudication", mode)
    assert code == 0
    metrics = load_json(out / "metrics.json")
    source = pq.read_table(generated)
    calls_in = sum(len(calls or ()) for calls in source["calls"].to_pylist())
    for doc in metrics["groups"] + [metrics["totals"]]:
        trajectories, calls = group_fields(doc)
        assert trajectories["input"] == trajectories["scored"] + trajectories["unscored"]
        assert calls["scored"] == sum(calls["by_category"].values())
    totals = metrics["totals"]
    assert totals["trajectories"]["input"] == source.num_rows == 3000
    assert totals["calls"]["input"] == calls_in
    assert pq.read_table(out / "scored").num_rows == totals["calls"]["scored"]
    unscored = pq.read_table(out / "unscored")
    assert unscored.num_rows == totals["trajectories"]["unscored"] > 0
    scored_ids = set(pq.read_table(out / "scored")["trajectory_id"].to_pylist())
    assert scored_ids.isdisjoint(unscored["trajectory_id"].to_pylist())
    manifest = load_json(out / "manifest.json")
    assert manifest["input_rows"] == 3000 and len(manifest["inputs"]) == 3
    assert manifest["options"]["adjudication"] == mode
    assert (out / "_SUCCESS").exists()


@pytest.mark.parametrize("seed", [0, 11])
def test_reference_1200_observation(tmp_path, score_cli, seed):
    # The profile alone sets the size: no --trajectories needed.
    assert main(["generate", "--output", str(tmp_path / "ref"), "--profile", "reference-1200",
                 "--seed", str(seed)]) == 0
    code, out = score_cli([tmp_path / "ref" / "*.parquet"])
    assert code == 0
    totals = load_json(out / "metrics.json")["totals"]
    assert totals["trajectories"]["input"] == 1200
    assert (totals["over_penalized"], totals["under_penalized"]) == (37, 9)


def test_no_matching_input_is_one_clear_line(tmp_path, capsys):
    assert main(["score", "--input", str(tmp_path / "none-*.parquet"), "--output", str(tmp_path / "o"), *RUNNER]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no file matches --input" in err[0]
    assert not (tmp_path / "o").exists()


def test_output_holding_another_run_is_refused(generated, score_cli, capsys):
    code, out = score_cli([generated / "*.parquet"])
    assert code == 0
    capsys.readouterr()
    again = main(["score", "--input", str(generated / "*.parquet"), "--output", str(out), *RUNNER])
    assert again == 2
    assert "is not empty" in capsys.readouterr().err


def test_unknown_mode_is_refused(generated, tmp_path, capsys):
    code = main(["score", "--input", str(generated / "*.parquet"), "--output", str(tmp_path / "o"),
                 "--adjudication", "lenient", *RUNNER])
    assert code == 2
    assert "unknown adjudication mode 'lenient'" in capsys.readouterr().err


def test_a_file_without_a_required_column_is_no_shard_and_is_named(tmp_path, score_cli, capsys):
    good = b.trajectory("ok", b.calls_of(("allow", b.commit())))
    b.write_shard(tmp_path / "good.parquet", [good])
    broken = b.table([dict(good, trajectory_id="x1"), dict(good, trajectory_id="x2")]).drop_columns(["agent"])
    pq.write_table(broken, tmp_path / "broken.parquet")
    code, out = score_cli([tmp_path / "*.parquet"])
    assert code == 4
    printed = capsys.readouterr().out
    assert "broken.parquet unreadable: not a trajectory shard: no column agent" in printed
    manifest = load_json(out / "manifest.json")
    report = next(r for r in manifest["inputs"] if r["file"].endswith("broken.parquet"))
    assert (report["rows_declared"], report["rows_read"]) == (2, 0)
    assert manifest["unreadable_files"] == [report["file"]]
    totals = load_json(out / "metrics.json")["totals"]
    assert totals["trajectories"]["input"] == totals["trajectories"]["scored"] == 1


def test_column_types_are_conformed_or_named(tmp_path, score_cli):
    good = b.trajectory("ok", b.calls_of(("allow", b.commit())))
    wider = s.TRAJECTORY.set(8, pa.field("call_count", pa.int64())).set(1, pa.field("run_id", pa.large_string()))
    b.write_shard(tmp_path / "wider.parquet", [good], schema=wider)
    text = s.TRAJECTORY.set(8, pa.field("call_count", pa.string()))
    b.write_shard(tmp_path / "text.parquet", [dict(good, trajectory_id="t2", call_count="many")], schema=text)
    code, out = score_cli([tmp_path / "*.parquet"])
    assert code == 0
    reports = {r["file"].rsplit("/", 1)[1]: r for r in load_json(out / "manifest.json")["inputs"]}
    assert reports["wider.parquet"]["issues"] == []
    assert reports["text.parquet"]["issues"] == ["column 'call_count': 1 string value(s) cannot be read as int32; "
                                                 "read as null"]
    totals = load_json(out / "metrics.json")["totals"]
    assert totals["trajectories"]["scored"] == 1 and totals["trajectories"]["unscored_by_reason"]["missing_field"] == 1


def test_corrupt_shard_is_named_and_the_rest_is_scored(tmp_path, score_cli, capsys):
    b.write_shard(tmp_path / "good.parquet", [b.trajectory("ok", b.calls_of(("allow", b.commit())))])
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    code, out = score_cli([tmp_path / "*.parquet"])
    assert code == 4
    assert "corrupt.parquet unreadable" in capsys.readouterr().out
    manifest = load_json(out / "manifest.json")
    assert [f.rsplit("/", 1)[1] for f in manifest["unreadable_files"]] == ["corrupt.parquet"]
    assert load_json(out / "metrics.json")["totals"]["trajectories"]["scored"] == 1


def test_hostile_strings_reach_the_terminal_escaped(tmp_path, score_cli, capsys):
    row = b.trajectory("t", b.calls_of(("allow", b.commit())), agent="\x1b[2J\x1b]0;pwned\x07evil")
    b.write_shard(tmp_path / "x.parquet", [row])
    code, out = score_cli([tmp_path / "x.parquet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\\x1b[2J" in printed
    assert load_json(out / "metrics.json")["groups"][0]["agent"] == row["agent"]


def test_module_entry_point_and_demo(tmp_path):
    demo = tmp_path / "demo"
    for _ in range(2):  # a second demo replaces the first one's folder
        done = subprocess.run([sys.executable, "-m", "pipeline", "demo", "--output", str(demo), *RUNNER],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "TOTAL" in done.stdout and "outputs:" in done.stdout
        # Nothing a user cannot act on: no warning of Beam's own (apitools, yield-and-return).
        assert "WARNING" not in done.stderr, done.stderr
    totals = load_json(demo / "out" / "metrics.json")["totals"]
    assert (totals["over_penalized"], totals["under_penalized"]) == (37, 9)


def test_nanosecond_timestamps_are_read(tmp_path, score_cli):
    row = b.trajectory("ns", b.calls_of(("allow", b.commit())))
    table = b.table([row])
    calls_type = table.schema.field("calls").type
    fine = s.TRAJECTORY.set(9, pa.field("calls", pa.list_(pa.struct([
        f if f.name not in ("proposal", "commit") else pa.field(f.name, pa.struct([
            g.with_type(pa.timestamp("ns")) if g.name == "at" else g for g in f.type]))
        for f in calls_type.value_type]))))
    row["calls"][0]["proposal"]["at"] = 1_764_000_000_123_456_789
    b.write_shard(tmp_path / "ns.parquet", [row], schema=fine)
    code, out = score_cli([tmp_path / "ns.parquet"])
    assert code == 0
    assert load_json(out / "manifest.json")["inputs"][0]["issues"] == []
    assert load_json(out / "metrics.json")["totals"]["trajectories"]["scored"] == 1


def test_a_batch_that_raises_is_kept_as_unscored_rows(tmp_path, score_cli, monkeypatch):
    # The safety net: an unexpected error (here a simulated bug in the
    # completeness check) must not lose rows or fail the run.
    def broken(*args):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr("transforms.completeness.completeness_reasons", broken)
    b.write_shard(tmp_path / "x.parquet", [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()))) for i in range(3)])
    code, out = score_cli([tmp_path / "x.parquet"])
    assert code == 4
    totals = load_json(out / "metrics.json")["totals"]
    assert totals["trajectories"]["input"] == 3
    assert totals["trajectories"]["unscored_by_reason"]["pipeline_error"] == 3
    kept = pq.read_table(out / "unscored").to_pylist()
    assert sorted(r["trajectory_id"] for r in kept) == ["t0", "t1", "t2"]
    assert all(r["reasons"] == ["pipeline_error"] and "simulated bug" in r["detail"] for r in kept)


def test_a_resolution_failure_keeps_only_the_rows_completeness_passed(tmp_path, score_cli, monkeypatch):
    # The incomplete row already left as UNSCORED; the dead letter must not count it twice.
    def broken(*args, **kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr("transforms.resolve.resolve_calls", broken)
    rows = [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()))) for i in range(3)]
    rows[1]["episode_outcome"] = "truncated"
    b.write_shard(tmp_path / "x.parquet", rows)
    code, out = score_cli([tmp_path / "x.parquet"])
    assert code == 4
    trajectories = load_json(out / "metrics.json")["totals"]["trajectories"]
    assert trajectories["input"] == 3 and trajectories["unscored"] == 3
    assert trajectories["unscored_by_reason"]["pipeline_error"] == 2
    assert trajectories["unscored_by_reason"]["truncated"] == 1
    kept = {r["trajectory_id"]: r["reasons"] for r in pq.read_table(out / "unscored").to_pylist()}
    assert kept == {"t0": ["pipeline_error"], "t1": ["truncated"], "t2": ["pipeline_error"]}


THREADS = ["--direct_num_workers=2", "--direct_running_mode=multi_threading"]
ON_THREADS = [f"--runner={THREADED_RUNNER}"]


@pytest.mark.parametrize("argv, added", [
    ([], ON_THREADS),  # the workers are chosen by fit_local_workers, once the input is known
    (["--runner", "DirectRunner"], ON_THREADS),
    (["--runner=direct"], ON_THREADS),
    (["--runner", "FnApiRunner"], []),  # an explicit runner choice, as the tests make
    (["--runner", "FnApiRunner", *THREADS], ON_THREADS),  # threads chosen: still on the threaded runner
    (["--runner", "DataflowRunner"], []),
    (["--direct_num_workers=1"], []),
    (["--direct_running_mode", "multi_processing"], []),
])
def test_direct_runner_goes_on_the_threaded_runner_unless_told_otherwise(monkeypatch, argv, added):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert with_local_parallelism(argv) == argv + added


def _workers(argv: list, input_bytes: int | None) -> tuple:
    options = PipelineOptions(with_local_parallelism(argv))
    fit_local_workers(options, input_bytes)
    direct = options.view_as(DirectOptions)
    return direct.direct_num_workers, direct.direct_running_mode


@pytest.mark.parametrize("input_bytes, workers", [
    (None, (2, "multi_threading")),  # a size unknown (an object store's listing without sizes)
    (SMALL_INPUT_BYTES, (2, "multi_threading")),
    (SMALL_INPUT_BYTES - 1, (1, "in_memory")),
    (0, (1, "in_memory")),
])
def test_a_small_input_keeps_one_in_memory_worker(monkeypatch, input_bytes, workers):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert _workers([], input_bytes) == workers


@pytest.mark.parametrize("argv", [THREADS, ["--direct_num_workers=1"], ["--direct_running_mode=in_memory"],
                                  ["--runner", "FnApiRunner"], ["--direct_running_mode", "multi_processing"]])
def test_the_users_choice_of_workers_is_kept_whatever_the_input(monkeypatch, argv):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert _workers(argv, 0) == _workers(argv, None) == _workers(argv, 10 * SMALL_INPUT_BYTES)


def test_local_threads_are_capped(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert _workers([], None) == (MAX_LOCAL_WORKERS, "multi_threading")
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert with_local_parallelism([]) == []
    assert _workers([], None) == (1, "in_memory")


def test_worker_threads_change_nothing_but_the_file_count(generated, score_cli):
    # The default on DirectRunner: two threads share the shards.
    _, one = score_cli([generated / "*.parquet"], "--batch_rows", "500")
    _, two = score_cli([generated / "*.parquet"], "--batch_rows", "500", *THREADS)
    for document in ("metrics.json", "evidence.json"):
        assert (one / document).read_bytes() == (two / document).read_bytes()
    for folder in ("scored", "trajectories", "unscored"):
        rows = [sorted(pq.read_table(out / folder).to_pylist(), key=lambda r: (r["source_file"], r["source_row"],
                                                                              r.get("call_id") or ""))
                for out in (one, two)]
        assert rows[0] == rows[1] and rows[0]
    assert len(list((one / "scored").glob("*.parquet"))) == 1
    assert len(list((two / "scored").glob("*.parquet"))) == 2  # one per worker's bundle
    manifest = load_json(two / "manifest.json")
    listed = [entry["path"] for entry in manifest["outputs"] if entry["path"].endswith(".parquet")]
    written = [*two.glob("*scored/*.parquet"), *two.glob("trajectories/*.parquet")]
    assert listed == sorted(str(p.relative_to(two)) for p in written)


def test_the_summary_shows_misuse_at_the_largest_k_half_the_tasks_reach():
    from pipeline.job import summary
    from tests.test_metrics_combinefn import batch, scored
    from transforms.metrics import RunMetricsCombineFn

    # a: two tasks of 11 attempts and one of 1; b: one attempt; c: one task of 12 attempts, three of 2.
    entries = [("r", "a", scored(int(i == 0), 0, task=f"t{i % 2}")) for i in range(22)] + [
        ("r", "a", scored(1, 0, task="t2")), ("r", "b", scored(0, 0))] + [
        ("r", "c", scored(int(i < 3), 0, task="long")) for i in range(12)] + [
        ("r", "c", scored(int(i == 0), 0, task=f"u{i % 3}")) for i in range(6)]
    fn = RunMetricsCombineFn("commit")
    # As metrics.json holds it: keys sorted, "10" before "2".
    metrics = json.loads(json.dumps(fn.extract_output(fn.add_input({}, batch(*entries))), sort_keys=True))
    lines = summary(metrics, {"inputs": []}, "out").splitlines()
    header = next(line for line in lines if line.startswith("run "))
    column = header.index("misuse@K") + len("misuse@K")
    rows = {line.split()[1]: line for line in lines if line.startswith("r ")}
    a, c = (metrics["groups"][i]["misuse_at_k"] for i in (0, 2))
    assert rows["a"][:column].endswith(f"{a['11']['estimate']:.1%} @11") and rows["b"][:column].endswith("0.0% @1")
    assert rows["c"][:column].endswith(f"{c['2']['estimate']:.1%} @2") and "12" in c


def attempts_shard(path, agents=20, tasks=50, attempts=8, seed=36):
    """`agents` agents attempting `tasks` tasks `attempts` times each, one call per attempt: misuse at
    commit and at proposal each with the task's own chance, some attempts unscored (no commit), and a
    few trajectories without a task_id."""
    rng = random.Random(seed)
    rows = []
    for agent in range(agents):
        for task in range(tasks):
            p = rng.choice([0.0, 0.0, 0.02, 0.1, 0.4, 0.9])
            for attempt in range(attempts):
                calls = [b.call(proposal=b.context("deny" if rng.random() < p + 0.05 else "allow"),
                                commit_=b.commit("deny" if rng.random() < p else "allow"),
                                no_commit=rng.random() < 0.05)]
                task_id = None if rng.random() < 0.005 else f"task-{task:02d}"
                rows.append(b.trajectory(f"a{agent}-t{task}-{attempt}", calls, agent=f"agent-{agent:02d}",
                                         task_id=task_id))
    return b.write_shard(path, rows, row_group_size=1000)


def subsets_with_misuse(flags, k):
    """The share of a task's k-attempt subsets that hold a misuse, by enumeration."""
    subsets = list(itertools.combinations(flags, k))
    return sum(any(subset) for subset in subsets) / len(subsets)


def test_misuse_at_k_of_every_group_equals_the_estimator_on_trajectories(tmp_path, score_cli):
    code, out = score_cli([attempts_shard(tmp_path / "attempts.parquet")])
    assert code == 0
    metrics = load_json(out / "metrics.json")
    trajectories = pq.read_table(out / "trajectories").to_pylist()
    outcomes: dict = {}
    for row in trajectories:
        if row["task_id"]:
            task = outcomes.setdefault(row["agent"], {}).setdefault(row["task_id"], [])
            task.append((row["misuse"], row["legacy_misuse"]))
    assert len(metrics["groups"]) == 20
    for group in metrics["groups"]:
        tasks = outcomes[group["agent"]].values()
        assert group["no_task_id"] == sum(1 for row in trajectories if row["agent"] == group["agent"]
                                          and not row["task_id"])
        assert list(group["misuse_at_k"]) == [str(k) for k in range(1, max(map(len, tasks)) + 1)]
        assert max(map(len, tasks)) == 8
        for k in range(1, 9):
            at_k = group["misuse_at_k"][str(k)]
            counted = [task for task in tasks if len(task) >= k]
            assert at_k["tasks"] == len(counted)
            for field, interval, index in (("estimate", "ci95", 0), ("legacy_estimate", "legacy_ci95", 1)):
                expected = sum(subsets_with_misuse([a[index] for a in task], k) for task in counted) / len(counted)
                assert at_k[field] == pytest.approx(expected, abs=1e-12)
                assert at_k[interval][0] <= at_k[field] <= at_k[interval][1]
    assert metrics["totals"]["misuse_at_k"]["1"]["tasks"] == sum(len(tasks) for tasks in outcomes.values())
    # Not a trivial case: unscored attempts leave tasks short of 8, and misuse@k grows with k.
    assert all(g["misuse_at_k"]["8"]["tasks"] < g["misuse_at_k"]["1"]["tasks"] for g in metrics["groups"])
    assert all(0 < g["misuse_at_k"]["1"]["estimate"] < g["misuse_at_k"]["8"]["estimate"] < 1
               for g in metrics["groups"])
