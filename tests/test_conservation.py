"""A run publishes only what it accounts for: rows a runner loses between stages fail the run."""

from pipeline import job
from tests import builders as b
from tests.conftest import load_json
from transforms.classify import ClassifyFn


def test_a_run_whose_runner_loses_a_batch_is_not_published(score_cli, monkeypatch, tmp_path):
    rows = [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()))) for i in range(6)]
    shard = b.write_shard(tmp_path / "in.parquet", rows, row_group_size=2)
    code, output = score_cli([shard])
    assert code == 0
    metrics = load_json(output / "metrics.json")
    assert metrics["inputs"]["rows_read"] == metrics["totals"]["trajectories"]["input"] == 6

    # The runner delivers every batch but the first to the classify stage (elements lost between stages).
    process, lost = ClassifyFn.process, []

    def losing(self, resolved):
        if not lost:
            lost.append(resolved.trajectories.num_rows)
            return iter(())
        return process(self, resolved)

    monkeypatch.setattr(ClassifyFn, "process", losing)
    code, output = score_cli([shard])
    assert lost and code == 1
    assert not (output / "_SUCCESS").exists()


def test_the_check_compares_rows_read_with_input_and_duplicates_dropped():
    metrics = {"inputs": {"rows_read": 5}, "totals": {"trajectories": {"input": 4, "duplicates_dropped": 1}}}
    job.unaccounted(metrics)
    metrics["totals"]["trajectories"]["duplicates_dropped"] = 0
    try:
        job.unaccounted(metrics)
    except job.Failed as failed:
        assert "5 trajectory row(s)" in str(failed) and "account for 4" in str(failed)
    else:
        raise AssertionError("a lost row was published")
