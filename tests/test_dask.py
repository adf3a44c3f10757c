"""`--runner dask` on a real scheduler with two worker processes: the same run as FnApiRunner's.

Also tells us when Beam's own DaskRunner stops needing pipeline/dask_runner.py.
"""

import uuid

import pytest

dask_distributed = pytest.importorskip("dask.distributed")

import apache_beam as beam  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from apache_beam import pvalue  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from pipeline.cli import main  # noqa: E402
from pipeline.options import with_our_runners  # noqa: E402
from tests import builders as b  # noqa: E402
from tests.conftest import RUNNER, load_json  # noqa: E402
from tests.engines import assert_same_run, reference_data  # noqa: E402


@pytest.fixture(scope="module")
def scheduler():
    """A two-worker LocalCluster (processes, loopback only), closed after the module's tests."""
    with dask_distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None) as cluster:
        with dask_distributed.Client(cluster) as client:
            yield client


def dask_flags(client):
    return ["--runner", "dask", "--dask_client_address", client.scheduler.address]


def score(inputs, output, flags):
    return main(["score", "--input", str(inputs), "--output", str(output), *flags])


@pytest.mark.engine
def test_a_run_on_dask_equals_fnapi(tmp_path, scheduler):
    shards = reference_data(tmp_path / "ref")
    assert score(shards, tmp_path / "fnapi", RUNNER) == 0
    assert score(shards, tmp_path / "dask", dask_flags(scheduler)) == 0
    assert_same_run(tmp_path / "dask", tmp_path / "fnapi")


def _broken(batch):
    raise RuntimeError("simulated bug")


def _swap_completeness_reasons(replacement=None):
    """On a worker: replaces (or, with None, restores) the completeness check's rule function."""
    from transforms import completeness

    if replacement is None:
        completeness.completeness_reasons = completeness._original_completeness_reasons
    else:
        completeness._original_completeness_reasons = completeness.completeness_reasons
        completeness.completeness_reasons = replacement


@pytest.mark.engine
def test_a_batch_that_raises_on_a_worker_goes_to_the_failed_dead_letter(tmp_path, scheduler, monkeypatch):
    # The safety-net test of test_cli, on worker processes: the same simulated
    # bug is planted in each worker (and, for FnApiRunner, in this process).
    rows = [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()))) for i in range(3)]
    rows[1]["episode_outcome"] = "truncated"
    b.write_shard(tmp_path / "x.parquet", rows)
    monkeypatch.setattr("transforms.completeness.completeness_reasons", _broken)
    assert score(tmp_path / "x.parquet", tmp_path / "fnapi", RUNNER) == 4
    scheduler.run(_swap_completeness_reasons, _broken)
    try:
        assert score(tmp_path / "x.parquet", tmp_path / "dask", dask_flags(scheduler)) == 4
    finally:
        scheduler.run(_swap_completeness_reasons)
    assert_same_run(tmp_path / "dask", tmp_path / "fnapi")
    totals = load_json(tmp_path / "dask" / "metrics.json")["totals"]["trajectories"]
    assert totals["unscored_by_reason"]["pipeline_error"] == 3
    (failed,) = (tmp_path / "dask" / "unscored").glob("failed-*.parquet")
    assert pq.read_metadata(failed).num_rows == 3


class _SplitByParity(beam.DoFn):
    def process(self, n):
        yield n if n % 2 == 0 else pvalue.TaggedOutput("odd", n)


def _touch(folder, tag):
    def write(n):
        (folder / f"{tag}-{n}").touch()
    return write


def _split_to_files(runner, folder, client):
    """Even numbers to the main output, odd ones to a tag; each output is its own sink: marker files."""
    folder.mkdir()
    options = PipelineOptions(["--dask_client_address", client.scheduler.address])
    pipeline = beam.Pipeline(runner=runner, options=options)
    split = pipeline | beam.Create([1, 2, 3, 4]) | beam.ParDo(_SplitByParity()).with_outputs("odd", main="even")
    split.even | "Even" >> beam.Map(_touch(folder, "even"))
    split.odd | "Odd" >> beam.Map(_touch(folder, "odd"))
    result = pipeline.run()
    result.wait_until_finish()
    result.client.close()  # Beam's result leaves its client open
    return sorted(path.name for path in folder.iterdir())


@pytest.mark.engine
def test_beams_own_dask_runner_still_needs_ours(tmp_path, scheduler):
    from apache_beam.runners.dask.dask_runner import DaskRunner as BeamDaskRunner

    from pipeline.dask_runner import DaskRunner

    expected = ["even-2", "even-4", "odd-1", "odd-3"]
    assert _split_to_files(DaskRunner(), tmp_path / "ours", scheduler) == expected
    beams = _split_to_files(BeamDaskRunner(), tmp_path / "beams", scheduler)
    assert beams != expected, (
        "Beam's DaskRunner now routes tagged outputs and runs every sink: drop pipeline/dask_runner.py "
        "and map `--runner dask` to Beam's runner (pipeline/options.py RUNNERS)"
    )


def _count_each_call(folder):
    def record(n):
        (folder / f"{n}-{uuid.uuid4().hex}").touch()  # a file per call, from whichever worker
        return n
    return record


@pytest.mark.engine
def test_each_element_is_processed_once_though_a_combine_reads_its_result_as_a_side_input(tmp_path, scheduler):
    # CombineGlobally's default value is injected through a side input of
    # its own result; made Delayed whole, that side input once ran every
    # upstream task again, so each shard was read once per global combine.
    from pipeline.dask_runner import DaskRunner

    calls, result = tmp_path / "calls", tmp_path / "result"
    calls.mkdir()
    options = PipelineOptions(["--dask_client_address", scheduler.scheduler.address])
    pipeline = beam.Pipeline(runner=DaskRunner(), options=options)
    numbers = pipeline | beam.Create([1, 2, 3, 4]) | "Count calls" >> beam.Map(_count_each_call(calls))
    numbers | "Sum" >> beam.CombineGlobally(sum) | "Write sum" >> beam.Map(lambda total: result.write_text(str(total)))
    numbers | "Largest" >> beam.CombineGlobally(max) | "Write largest" >> beam.Map(_touch(tmp_path, "largest"))
    outcome = pipeline.run()
    outcome.wait_until_finish()
    outcome.client.close()
    assert sorted(path.name.split("-")[0] for path in calls.iterdir()) == ["1", "2", "3", "4"]
    assert result.read_text() == "10"
    assert (tmp_path / "largest-4").exists()


@pytest.mark.parametrize("argv, expected", [
    (["--runner", "dask"], ["--runner", "pipeline.dask_runner.DaskRunner"]),
    (["--runner=DaskRunner", "--x"], ["--runner=pipeline.dask_runner.DaskRunner", "--x"]),
    (["--runner", "FnApiRunner", "dask"], ["--runner", "FnApiRunner", "dask"]),
    (["--runner", "apache_beam.runners.dask.dask_runner.DaskRunner"],
     ["--runner", "apache_beam.runners.dask.dask_runner.DaskRunner"]),
])
def test_dask_is_our_runners_short_name(argv, expected):
    assert with_our_runners(argv) == expected


class _Emit(beam.DoFn):
    """Logs each value it emits; sends the even ones to the main output and the odd ones to a tag."""

    def __init__(self, log):
        self._log = log

    def process(self, count):
        for n in range(count):
            with open(self._log, "a") as log:
                log.write(f"emit {n}\n")
            yield n if n % 2 == 0 else pvalue.TaggedOutput("odd", n)


def _log_receipt(log, kind):
    def receive(n):
        with open(log, "a") as handle:
            handle.write(f"{kind} {n}\n")
    return receive


@pytest.mark.engine
def test_a_chain_of_pardos_with_tagged_outputs_streams_each_value_through_in_one_task(tmp_path, scheduler):
    # Each value reaches the next ParDos while the first is still emitting:
    # nothing waits in worker memory for the whole of an upstream output.
    from pipeline.dask_runner import DaskRunner

    log = tmp_path / "log"
    options = PipelineOptions(["--dask_client_address", scheduler.scheduler.address])
    pipeline = beam.Pipeline(runner=DaskRunner(), options=options)
    split = pipeline | beam.Create([4]) | beam.ParDo(_Emit(str(log))).with_outputs("odd", main="even")
    split.even | "Even" >> beam.Map(_log_receipt(str(log), "even"))
    split.odd | "Odd" >> beam.Map(_log_receipt(str(log), "odd"))
    outcome = pipeline.run()
    outcome.wait_until_finish()
    outcome.client.close()
    assert log.read_text().splitlines() == [
        "emit 0", "even 0", "emit 1", "odd 1", "emit 2", "even 2", "emit 3", "odd 3"]


@pytest.mark.engine
def test_a_pardo_whose_side_input_comes_from_its_own_chain_waits_for_it(tmp_path, scheduler):
    # Fused into the chain that computes its side input, the task would wait on itself.
    from pipeline.dask_runner import DaskRunner

    options = PipelineOptions(["--dask_client_address", scheduler.scheduler.address])
    pipeline = beam.Pipeline(runner=DaskRunner(), options=options)
    numbers = pipeline | beam.Create([1, 2, 3]) | "Square" >> beam.Map(lambda n: n * n)
    total = numbers | "Sum" >> beam.CombineGlobally(sum)
    shares = numbers | "Share" >> beam.Map(lambda n, whole: f"{n}of{whole}", beam.pvalue.AsSingleton(total))
    shares | "Write" >> beam.Map(_touch(tmp_path, "share"))
    outcome = pipeline.run()
    outcome.wait_until_finish()
    outcome.client.close()
    assert sorted(path.name for path in tmp_path.glob("share-*")) == ["share-1of14", "share-4of14", "share-9of14"]


def _write_malloc_setting(path):
    def write(_):
        import os

        with open(path, "w") as out:
            out.write(repr(os.environ.get("MALLOC_TRIM_THRESHOLD_")))
    return write


@pytest.mark.engine
def test_the_local_clusters_workers_keep_glibcs_own_malloc_tuning(tmp_path, monkeypatch):
    # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536, which fixes glibc's mmap
    # threshold too: a large import ran 1.55x slower (docs/runners.md). A nanny
    # also leaves it in its own process's environment, so another test's
    # cluster would leak it into this one's workers.
    from pipeline.dask_runner import DaskRunner

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)

    seen = tmp_path / "seen"
    pipeline = beam.Pipeline(runner=DaskRunner(), options=PipelineOptions(["--dask_local_workers", "1"]))
    pipeline | beam.Create([None]) | beam.Map(_write_malloc_setting(str(seen)))
    pipeline.run().wait_until_finish()
    assert seen.read_text() == "None"
