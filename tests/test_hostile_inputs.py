"""What a careless or hostile night's input does, end to end: every row is
accounted for, a defect costs only its own row, and nothing is counted twice
(issue 8's probe, one test per finding)."""

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from tests import builders as b
from tests.conftest import RUNNER, load_json
from transforms import duplicates, jsontext
from transforms import schema as s

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow


def good(trajectory_id, **overrides):
    return b.trajectory(trajectory_id, b.calls_of(("deny", b.commit("deny")), ("allow", b.commit())), **overrides)


def totals(out):
    return load_json(out / "metrics.json")["totals"]


def inputs_by_name(out):
    return {os.path.basename(r["file"]): r for r in load_json(out / "manifest.json")["inputs"]}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reference")
    assert main(["generate", "--output", str(folder), "--profile", "reference-1200"]) == 0
    return folder


def test_a_copied_shard_and_a_corrupt_file_count_once_and_are_named(reference, tmp_path, score_cli, capsys):
    # The done-when: 1,200 trajectories, 37 over-penalized, 300 duplicates dropped, exit 4.
    folder = tmp_path / "night"
    shutil.copytree(reference, folder)
    # The same rows written again (other row groups): copies of trajectories, not of the file's bytes.
    rewritten = pq.read_table(folder / "part-00001-of-00004.parquet")
    pq.write_table(rewritten, folder / "part-00001-copy.parquet", row_group_size=64)
    (folder / "part-corrupt.parquet").write_bytes(b"PAR1 this is not a parquet file PAR1")
    code, out = score_cli([folder / "*.parquet"])
    assert code == 4
    metrics = load_json(out / "metrics.json")
    t = metrics["totals"]
    assert t["trajectories"]["input"] == 1200 and t["trajectories"]["duplicates_dropped"] == 300
    assert t["over_penalized"] == 37 and t["under_penalized"] == 9
    assert metrics["inputs"] == {"files": 6, "unreadable_files": 1, "rows_declared": 1500, "rows_read": 1500}
    for group in metrics["groups"] + [t]:
        # Conservation: rows read = input + duplicates dropped, per group and in total.
        assert group["trajectories"]["input"] == group["trajectories"]["scored"] + group["trajectories"]["unscored"]
    assert sum(g["trajectories"]["input"] + g["trajectories"]["duplicates_dropped"] for g in metrics["groups"]) == 1500
    assert inputs_by_name(out)["part-corrupt.parquet"]["error"]
    assert pq.read_table(out / "scored").num_rows == t["calls"]["scored"]
    printed = capsys.readouterr().out
    assert "1200 trajectories from 6 shard(s)" in printed and "300 duplicate(s) dropped" in printed
    assert "part-corrupt.parquet unreadable" in printed


def test_one_file_under_several_spellings_is_read_once(tmp_path, score_cli):
    path = b.write_shard(tmp_path / "a.parquet", [good("t1"), good("t2")])
    os.symlink(path, tmp_path / "link.parquet")
    code, out = score_cli([path, f"{tmp_path}/./a.parquet", tmp_path / "link.parquet", f"{tmp_path}//a.parquet"])
    assert code == 0
    (report,) = load_json(out / "manifest.json")["inputs"]
    assert report["file"] == os.path.realpath(path) and len(report["aliases"]) == 3
    assert totals(out)["trajectories"]["input"] == 2 and totals(out)["trajectories"]["duplicates_dropped"] == 0


def test_copies_of_a_trajectory_count_once_and_conflicting_ones_are_unscored(tmp_path, score_cli):
    b.write_shard(tmp_path / "a.parquet", [good("same"), good("differs"), good("solo")])
    b.write_shard(tmp_path / "b.parquet", [good("same"), good("differs", verbal_stance="refused"), good("same")])
    code, out = score_cli([tmp_path / "*.parquet"])
    assert code == 0
    t = totals(out)
    assert t["trajectories"]["duplicates_dropped"] == 2  # "same": one kept, two dropped
    assert t["trajectories"]["input"] == 4 and t["trajectories"]["scored"] == 2
    assert t["trajectories"]["unscored_by_reason"]["duplicate_trajectory"] == 2
    unscored = pq.read_table(out / "unscored").to_pylist()
    assert sorted((r["trajectory_id"], r["reasons"][0]) for r in unscored) == [
        ("differs", "duplicate_trajectory"), ("differs", "duplicate_trajectory")]
    assert all("2 copies differ" in r["detail"] for r in unscored)
    kept = pq.read_table(out / "scored").to_pylist()
    assert {(r["trajectory_id"], r["source_file"].rsplit("/", 1)[1], r["source_row"]) for r in kept} == {
        ("same", "a.parquet", 0), ("solo", "a.parquet", 2)}


def test_the_same_id_in_another_run_is_another_trajectory(tmp_path, score_cli):
    b.write_shard(tmp_path / "a.parquet", [good("t1"), good("t1", run_id="run-2")])
    code, out = score_cli([tmp_path / "a.parquet"])
    assert code == 0 and totals(out)["trajectories"]["scored"] == 2


@pytest.mark.parametrize("field", ["agent", "tool", "arguments", "trajectory_id"])
def test_invalid_utf8_costs_only_its_own_row(tmp_path, score_cli, field):
    bad = good("bad")
    if field == "tool":
        bad["calls"][1]["tool"] = b"write_\xfffile"
    elif field == "arguments":
        bad["calls"][0]["arguments"] = b'{"path": "/tmp/\xc3"}'
    else:
        bad[field] = b"ag\xffent-\xfe"
    b.write_shard(tmp_path / "a.parquet", [good("t1"), bad, good("t2")])
    code, out = score_cli([tmp_path / "a.parquet"])
    assert code == 0
    t = totals(out)
    assert t["trajectories"]["scored"] == 2 and t["trajectories"]["unscored_by_reason"]["invalid_text"] == 1
    # Every output reads back as valid UTF-8.
    for folder in ("scored", "unscored"):
        pq.read_table(out / folder).validate(full=True)
    (record,) = pq.read_table(out / "unscored").to_pylist()
    assert record["reasons"] == ["invalid_text"] and "not UTF-8" in record["detail"]
    assert "\ufffd" in str(record["input_row"]) or "\ufffd" in record["trajectory_id"]


@pytest.mark.parametrize("flags", [["--adjudication", "strict"], ["--policy", "configs/policy.yaml"]])
def test_deeply_nested_json_costs_only_its_own_row(tmp_path, score_cli, flags):
    deep = good("deep")
    nested = "[" * 400 + "]" * 400
    deep["calls"][0]["arguments"] = f'{{"path": {nested}}}'
    deep["calls"][0]["commit"]["resolved_arguments"] = f'{{"path": {nested[:-1]}1]}}'
    rows = [good(f"t{i}") for i in range(5)] + [deep]
    b.write_shard(tmp_path / "a.parquet", rows)
    code, out = score_cli([tmp_path / "a.parquet"], *flags)
    assert code == 0
    t = totals(out)
    assert t["trajectories"]["scored"] == 5 and t["trajectories"]["unscored_by_reason"]["too_large"] == 1
    assert "pipeline_error" not in t["trajectories"]["unscored_by_reason"]


def test_bounds_are_options_and_go_into_the_manifest(tmp_path, score_cli):
    long_text = good("long")
    long_text["calls"][0]["arguments"] = '{"content": "' + "x" * 5000 + '"}'
    many = b.trajectory("many", [b.call(f"c{i}", i) for i in range(6)])
    b.write_shard(tmp_path / "a.parquet", [good("t1"), long_text, many])
    code, out = score_cli([tmp_path / "a.parquet"], "--max_text_bytes", "1000", "--max_calls_per_trajectory", "5")
    assert code == 0
    assert totals(out)["trajectories"]["unscored_by_reason"]["too_large"] == 2
    options = load_json(out / "manifest.json")["options"]
    assert (options["max_text_bytes"], options["max_calls_per_trajectory"], options["max_json_depth"]) == (1000, 5, 64)
    details = sorted(r["detail"] for r in pq.read_table(out / "unscored").to_pylist())
    assert details == ["too large: calls[].arguments", "too large: over 5 calls"]


@pytest.mark.parametrize("flag", ["--max_text_bytes=0", "--max_json_depth=1000", "--max_slice_keys=-1"])
def test_a_bound_out_of_range_is_a_usage_error(tmp_path, score_cli, capsys, flag):
    b.write_shard(tmp_path / "a.parquet", [good("t1")])
    code, _ = score_cli([tmp_path / "a.parquet"], flag)
    assert code == 2 and flag.split("=")[0] in capsys.readouterr().err


def hostile_mix(folder):
    """Two shards with every row-level defect, in row groups of 7 and 3."""
    rows = [good(f"t{i:02d}") for i in range(40)]
    rows[3]["calls"][0]["arguments"] = '{"a": ' + "[" * 300 + "]" * 300 + "}"
    rows[5]["agent"] = b"bad\xff"
    rows[8]["calls"][1]["arguments"] = '{"a": "' + "y" * 3000 + '"}'
    rows[13]["calls"][0]["arguments"] = "{broken"
    rows[21] = dict(rows[20])  # an exact copy
    rows[34] = dict(rows[33], task_id="other")  # a conflicting copy
    wide = s.TRAJECTORY.set(8, pa.field("call_count", pa.int64()))
    int64_rows = [dict(r) for r in rows[:20]]
    int64_rows[11]["call_count"] = 2 ** 40
    b.write_shard(folder / "a.parquet", int64_rows, row_group_size=7, schema=wide)
    text = s.TRAJECTORY.set(8, pa.field("call_count", pa.string()))
    text_rows = [dict(r, call_count=str(r["call_count"])) for r in rows[20:]]
    text_rows[6]["call_count"] = "many"
    b.write_shard(folder / "b.parquet", text_rows, row_group_size=3, schema=text)


def test_results_do_not_depend_on_batch_size_or_row_groups(tmp_path, score_cli):
    hostile_mix(tmp_path)
    documents = set()
    for batch_rows in ("1", "7", "100", None):
        flags = ["--max_text_bytes", "2000", "--adjudication", "strict"]
        code, out = score_cli([tmp_path / "*.parquet"], *flags, *(["--batch_rows", batch_rows] if batch_rows else []))
        assert code == 0
        documents.add((out / "metrics.json").read_bytes())
    assert len(documents) == 1
    t = load_json(out / "metrics.json")["totals"]["trajectories"]
    assert t["input"] == 39 and t["duplicates_dropped"] == 1
    reasons = t["unscored_by_reason"]
    assert (reasons["too_large"], reasons["invalid_text"], reasons["duplicate_trajectory"]) == (2, 1, 2)
    assert reasons["missing_field"] == 2  # the two call_counts that cannot be read, and only those
    assert t["scored"] == 39 - 2 - 1 - 2 - 2 - 1  # and the malformed call


def corrupt_row_group(path, group):
    """Overwrites the start of one row group's first column chunk with garbage."""
    chunk = pq.ParquetFile(path).metadata.row_group(group).column(0)
    data = bytearray(open(path, "rb").read())
    start = chunk.data_page_offset
    data[start:start + 64] = b"\xff" * 64
    open(path, "wb").write(bytes(data))


def test_a_corrupt_row_group_costs_its_rows_and_is_counted(tmp_path, score_cli):
    path = b.write_shard(tmp_path / "half.parquet", [good(f"t{i:03d}") for i in range(500)], row_group_size=100)
    corrupt_row_group(path, 2)
    corrupt_row_group(path, 4)
    code, out = score_cli([path])
    assert code == 4
    metrics = load_json(out / "metrics.json")
    assert metrics["inputs"] == {"files": 1, "unreadable_files": 1, "rows_declared": 500, "rows_read": 300}
    assert metrics["totals"]["trajectories"]["input"] == 300
    (report,) = load_json(out / "manifest.json")["inputs"]
    assert report["row_groups_unreadable"] == [2, 4] and report["error"].startswith("200 of 500 rows unreadable")
    # source_row is the row's place in the file, past the lost row group too.
    rows = sorted(set(pq.read_table(out / "scored")["source_row"].to_pylist()))
    assert rows == list(range(200)) + list(range(300, 400))


def test_every_matched_path_is_read_or_named(tmp_path, score_cli):
    b.write_shard(tmp_path / "good.parquet", [good("t1")])
    os.symlink(tmp_path / "gone.parquet", tmp_path / "broken.parquet")
    os.symlink(tmp_path / "loop.parquet", tmp_path / "loop.parquet")
    (tmp_path / "spark.parquet").mkdir()  # a folder matched stands for the shards under it
    b.write_shard(tmp_path / "spark.parquet" / "part-0.parquet", [good("t2")])
    (tmp_path / "spark.parquet" / "_SUCCESS").write_bytes(b"")
    os.mkfifo(tmp_path / "fifo.parquet")
    code, out = score_cli([tmp_path / "*.parquet"])  # must not hang on the pipe
    assert code == 4
    reports = inputs_by_name(out)
    assert set(reports) == {"good.parquet", "broken.parquet", "loop.parquet", "part-0.parquet", "fifo.parquet"}
    assert reports["good.parquet"]["error"] is None and reports["part-0.parquet"]["error"] is None
    assert "pipe" in reports["fifo.parquet"]["error"]
    assert all(reports[name]["error"] for name in ("broken.parquet", "loop.parquet"))
    assert totals(out)["trajectories"]["input"] == 2
    assert load_json(out / "metrics.json")["inputs"]["unreadable_files"] == 3


def test_a_file_that_shares_no_column_with_the_contract_is_unreadable(tmp_path, score_cli):
    pq.write_table(pa.table({"x": list(range(300)), "y": list(range(300))}), tmp_path / "other.parquet")
    b.write_shard(tmp_path / "good.parquet", [good("t1")])
    code, out = score_cli([tmp_path / "*.parquet"])
    assert code == 4
    assert inputs_by_name(out)["other.parquet"]["error"].startswith("not a trajectory shard: no column schema_version")
    assert totals(out)["trajectories"]["input"] == 1
    assert load_json(out / "metrics.json")["inputs"] == {"files": 2, "unreadable_files": 1, "rows_declared": 301,
                                                         "rows_read": 1}


def test_many_distinct_tools_keep_metrics_small(tmp_path, score_cli):
    rows = [b.trajectory(f"t{i}", [b.call(f"c{j}", j, tool=f"tool-{i}-{j}") for j in range(3)]) for i in range(1000)]
    b.write_shard(tmp_path / "a.parquet", rows)
    code, out = score_cli([tmp_path / "a.parquet"], "--max_slice_keys", "50")
    assert code == 0
    metrics = load_json(out / "metrics.json")
    for doc in metrics["groups"] + [metrics["totals"]]:
        tools = doc["slices"]["tool"]
        assert len(tools) == 51 and sum(tool["calls"] for tool in tools.values()) == 3000
    assert os.path.getsize(out / "metrics.json") < 200_000


def test_hash_collisions_cost_work_not_results(tmp_path, score_cli, monkeypatch):
    hostile_mix(tmp_path)
    code, plain = score_cli([tmp_path / "*.parquet"], "--max_text_bytes", "2000")
    assert code == 0
    # Every key hashing alike makes every row a candidate: decisions compare exact keys.
    monkeypatch.setattr("transforms.duplicates.key_hashes",
                        lambda run_id, trajectory_id: np.zeros(len(run_id), np.uint64))
    code, colliding = score_cli([tmp_path / "*.parquet"], "--max_text_bytes", "2000")
    assert code == 0
    assert (plain / "metrics.json").read_bytes() == (colliding / "metrics.json").read_bytes()


def test_an_extra_column_that_is_not_utf8_is_kept_as_data(tmp_path, score_cli):
    wider = s.TRAJECTORY.append(pa.field("note", pa.string()))
    rows = [dict(good("t1"), note="fine"), dict(good("t2", call_count=7), note=b"bad \xff byte")]
    b.write_shard(tmp_path / "a.parquet", rows, schema=wider)
    code, out = score_cli([tmp_path / "a.parquet"])
    assert code == 0  # extra columns never make a row invalid
    t = totals(out)["trajectories"]
    assert t["scored"] == 1 and t["unscored_by_reason"]["call_count_mismatch"] == 1
    (record,) = pq.read_table(out / "unscored").to_pylist()
    assert record["reasons"] == ["call_count_mismatch"] and record["extra_columns"] == '{"note": "bad \ufffd byte"}'


def conserved(metrics) -> None:
    """Rows read = input + duplicates dropped, and input = scored + unscored, per group and in total."""
    for group in metrics["groups"] + [metrics["totals"]]:
        t = group["trajectories"]
        assert t["input"] == t["scored"] + t["unscored"]
    assert metrics["inputs"]["rows_read"] == sum(
        g["trajectories"]["input"] + g["trajectories"]["duplicates_dropped"] for g in metrics["groups"])


def published(out) -> bool:
    return (out / "_SUCCESS").exists() and pq.read_table(out / "scored").num_rows == totals(out)["calls"]["scored"]


def test_an_earlier_run_under_the_input_glob_is_refused_and_named(reference, tmp_path, score_cli):
    folder = tmp_path / "d"
    shutil.copytree(reference, folder)
    assert main(["score", "--input", f"{folder}/**/*.parquet", "--output", str(folder / "out"), *RUNNER]) == 0
    code, out = score_cli([f"{folder}/**/*.parquet"])
    assert code == 4
    metrics, first = load_json(out / "metrics.json"), load_json(folder / "out" / "metrics.json")
    # The same trajectories as the first run, none counted twice or set aside as a duplicate.
    assert metrics["groups"] == first["groups"] and metrics["totals"] == first["totals"]
    assert metrics["totals"]["trajectories"]["input"] == 1200 == metrics["inputs"]["rows_read"]
    conserved(metrics)
    manifest = load_json(out / "manifest.json")
    refused = [r for r in manifest["inputs"] if "/out/" in r["file"]]
    outputs = load_json(folder / "out" / "manifest.json")["outputs"]
    written = {e["path"] for e in outputs if e["path"].endswith(".parquet")}
    assert {os.path.relpath(path, folder / "out") for r in refused for path in [r["file"], *r["copies"]]} == written
    assert all(r["rows_read"] == 0 and r["error"].startswith("an output of litmus-score (") for r in refused)
    assert sorted(manifest["unreadable_files"]) == sorted(r["file"] for r in refused)
    assert published(out)


def replace_file(path, source) -> None:
    """Another file's bytes written under a temporary name, then renamed over `path`."""
    shutil.copy(source, f"{path}.partial")
    os.replace(f"{path}.partial", path)


def test_a_shard_replaced_after_the_key_pass_is_unreadable_and_named(reference, tmp_path, score_cli, monkeypatch):
    folder = tmp_path / "night"
    shutil.copytree(reference, folder)
    target = folder / "part-00002-of-00004.parquet"
    declared = pq.ParquetFile(target).metadata.num_rows
    code, others = score_cli([folder / f"part-0000{i}-of-00004.parquet" for i in (0, 1, 3)])
    assert code == 0
    index = duplicates.key_index

    def index_then_replace(shard):
        found = index(shard)
        if shard.path == str(target):  # the key pass has read it: now it is swapped for another shard's rows
            replace_file(target, folder / "part-00000-of-00004.parquet")
        return found

    monkeypatch.setattr("transforms.duplicates.key_index", index_then_replace)
    code, out = score_cli([folder / "*.parquet"])
    assert code == 4
    metrics = load_json(out / "metrics.json")
    # Neither version of the file is counted; every other shard is scored as on its own.
    assert metrics["totals"] == load_json(others / "metrics.json")["totals"]
    assert metrics["inputs"] == {"files": 4, "unreadable_files": 1, "rows_declared": 1200,
                                 "rows_read": 1200 - declared}
    conserved(metrics)
    report = inputs_by_name(out)[target.name]
    assert (report["rows_declared"], report["rows_read"]) == (declared, 0)
    assert "changed after the run matched it" in report["error"]
    assert published(out)


def test_a_byte_identical_copy_is_read_once_whatever_its_rows_hold(tmp_path, score_cli, capsys):
    rows = [good("t1"), good("t2"), good("no-run", run_id=None), good(None)]
    path = b.write_shard(tmp_path / "a.parquet", rows)
    code, alone = score_cli([path])
    assert code == 0
    shutil.copy(path, tmp_path / "copy.parquet")
    code, out = score_cli([tmp_path / "*.parquet"])
    assert code == 0
    assert (out / "metrics.json").read_bytes() == (alone / "metrics.json").read_bytes()
    t = totals(out)["trajectories"]
    assert (t["input"], t["duplicates_dropped"], t["unscored_by_reason"]["missing_field"]) == (4, 0, 2)
    (report,) = load_json(out / "manifest.json")["inputs"]
    assert report["copies"] == [str(tmp_path / "copy.parquet")] and report["rows_read"] == 4
    assert "copy.parquet holds the same bytes: read once" in capsys.readouterr().out


def shards_and_strays(folder):
    """Two shards (one in a subfolder), and what a folder holds beside them."""
    b.write_shard(folder / "a.parquet", [good("t1"), good("t2")])
    (folder / "sub").mkdir()
    b.write_shard(folder / "sub" / "b.parquet", [good("t3")])
    (folder / "notes.txt").write_text("not a shard\n")
    (folder / "_SUCCESS").write_bytes(b"")
    for hidden in (".partial", "_temporary"):
        (folder / hidden).mkdir()
        b.write_shard(folder / hidden / "c.parquet", [good("t4")])
    return [folder / "a.parquet", folder / "sub" / "b.parquet"]


@pytest.mark.parametrize("spelling", ["{folder}", "{folder}/", "{folder}/./"])
def test_a_folder_stands_for_the_shards_under_it(tmp_path, score_cli, spelling):
    folder = tmp_path / "night"
    folder.mkdir()
    shards = shards_and_strays(folder)
    code, named = score_cli(shards)
    assert code == 0
    code, out = score_cli([spelling.format(folder=folder)])
    assert code == 0
    assert (out / "metrics.json").read_bytes() == (named / "metrics.json").read_bytes()
    assert sorted(r["file"] for r in load_json(out / "manifest.json")["inputs"]) == sorted(map(str, shards))
    assert totals(out)["trajectories"]["input"] == 3 and published(out)


def test_a_folder_without_shards_is_a_usage_error_and_nothing_is_written(tmp_path, capsys):
    folder = tmp_path / "empty"
    (folder / "_temporary").mkdir(parents=True)
    b.write_shard(folder / "_temporary" / "a.parquet", [good("t1")])
    (folder / "notes.txt").write_text("not a shard\n")
    out = tmp_path / "out"
    assert main(["score", "--input", f"{folder}/", "--output", str(out), *RUNNER]) == 2
    assert "holds no .parquet file" in capsys.readouterr().err
    assert not out.exists()


def test_many_agents_are_bounded_like_slices(tmp_path, score_cli, capsys):
    rows = [good(f"t{i}", agent=f"agent-{i:04d}", run_id=f"run-{i % 3}") for i in range(600)]
    b.write_shard(tmp_path / "a.parquet", rows, row_group_size=128)
    code, unbounded = score_cli([tmp_path / "a.parquet"])
    assert code == 0
    capsys.readouterr()
    code, out = score_cli([tmp_path / "a.parquet"], "--max_groups", "40", "--batch_rows", "50")
    assert code == 0
    metrics = load_json(out / "metrics.json")
    keys = [(g["run_id"], g["agent"]) for g in metrics["groups"]]
    assert len(keys) == 41 and ("(other)", "(other)") in keys
    assert metrics["totals"] == load_json(unbounded / "metrics.json")["totals"]
    conserved(metrics)
    kept = {(g["run_id"], g["agent"]): g for g in load_json(unbounded / "metrics.json")["groups"]}
    assert all(g == kept[(g["run_id"], g["agent"])] for g in metrics["groups"] if g["agent"] != "(other)")
    assert load_json(out / "manifest.json")["options"]["max_groups"] == 40
    assert "more (run_id, agent) groups than --max_groups: 40 kept, the rest (560 trajectories)" in (
        capsys.readouterr().out)
    assert os.path.getsize(out / "metrics.json") < os.path.getsize(unbounded / "metrics.json") / 10


# Resolved arguments that JSON can spell but UTF-8 cannot hold: a lone surrogate as a key, and as the value.
LONE_SURROGATE_KEY = '{"\\ud800": "x", "path": "/tmp/report.txt"}'
LONE_SURROGATE_VALUE = '{"path": "\\ud800", "mode": "0644"}'


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "twin"])
def test_a_lone_surrogate_in_the_resolved_arguments_costs_no_other_row(tmp_path, score_cli, compiled):
    if compiled and not jsontext.available():
        pytest.skip("the compiled part is not built")
    # Every pair of verdicts, so over- and under-penalized trajectories decide on the hostile commit.
    hostile = [b.trajectory(f"h-{n}-{proposal}-{verdict}", [b.call(
        "c0", 0, proposal=b.context(proposal), commit_=b.commit(verdict, args=args))])
        for n, args in enumerate((LONE_SURROGATE_KEY, LONE_SURROGATE_VALUE))
        for proposal in ("deny", "allow") for verdict in ("deny", "allow")]
    path = b.write_shard(tmp_path / "night.parquet", hostile + [good(f"g{n}") for n in range(5)])
    with jsontext.implementation(compiled):
        code, out = score_cli([path])
    assert code == 0  # was 1: "surrogates not allowed" in a Beam coder, nothing published
    metrics = load_json(out / "metrics.json")
    assert metrics["totals"]["trajectories"]["input"] == len(hostile) + 5
    cases = [case for group in load_json(out / "evidence.json")["groups"]
             for kind in ("over_penalized", "under_penalized") for case in group[kind]["cases"]]
    assert len(cases) == metrics["totals"]["over_penalized"] + metrics["totals"]["under_penalized"] > 0
    # The surrogate is shown as the data spelled it, escaped.
    patches = [op for case in cases if case["call"]["patch"] for op in case["call"]["patch"]]
    assert {"op": "add", "path": "/\\ud800", "value": '"x"'} in patches
    assert {"op": "replace", "path": "/path", "value": '"\\ud800"'} in patches
