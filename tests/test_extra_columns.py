"""Extra columns of any Arrow type, written by the tools teams use, never
change a row's fate: the conformance set with extra columns scores the same,
byte for byte, whether pyarrow, polars, DuckDB or pandas wrote its shards."""

import datetime
import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import RUNNER, load_json, main
from tests.test_conformance import CONFORMANCE, differences

polars = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")
pandas = pytest.importorskip("pandas")

pytestmark = pytest.mark.skipif(not CONFORMANCE.is_dir(), reason=f"no conformance set at {CONFORMANCE}")


def with_extra_columns(table: pa.Table) -> pa.Table:
    """`table` with one extra column of each kind of Arrow type, nulls included."""
    rows = range(table.num_rows)
    at = datetime.datetime(2026, 12, 4, 18, 0, tzinfo=datetime.UTC)
    extras = {
        "note": pa.array([f"note {i}" if i % 3 else None for i in rows], pa.string()),
        "big_note": pa.array([f"big {i}" for i in rows], pa.large_string()),
        "label": pa.array([("a", "b", None)[i % 3] for i in rows], pa.string()).dictionary_encode(),
        "meta": pa.array([{"k": f"v{i}", "n": i} for i in rows], pa.struct([("k", pa.string()), ("n", pa.int64())])),
        "tags": pa.array([[f"t{i}", "x"] if i % 2 else [] for i in rows], pa.list_(pa.string())),
        "blob": pa.array([bytes([i % 256, 0xFF]) for i in rows], pa.binary()),
        "seen_at": pa.array([at + datetime.timedelta(seconds=i) for i in rows], pa.timestamp("us", tz="UTC")),
        "cost": pa.array([decimal.Decimal(i) / 100 for i in rows], pa.decimal128(12, 2)),
    }
    for name, column in extras.items():
        table = table.append_column(name, column)
    return table


def write_with_pyarrow(table, path):
    pq.write_table(table, path)


def write_with_polars(table, path):
    # Polars' own Arrow types: strings and binaries as views (string_view, binary_view).
    frame = polars.from_arrow(table)
    views = frame.to_arrow(compat_level=polars.CompatLevel.newest()).schema
    assert pa.string_view() in [f.type for f in views]
    frame.write_parquet(path, arrow_schema=views)


def write_with_duckdb(table, path):
    connection = duckdb.connect()
    connection.register("shard", table)
    connection.execute(f"COPY (SELECT * FROM shard) TO '{path}' (FORMAT parquet)")
    connection.close()


def write_with_pandas(table, path):
    table.to_pandas(types_mapper=pandas.ArrowDtype).to_parquet(path, index=False)


def write_shards(folder, write):
    folder.mkdir()
    for shard in sorted((CONFORMANCE / "shards").glob("*.parquet")):
        write(with_extra_columns(pq.read_table(shard)), folder / shard.name)


def unscored_extras(output):
    table = pq.read_table(output / "unscored")
    return sorted(zip([p.rsplit("/", 1)[-1] for p in table["source_file"].to_pylist()],
                      table["source_row"].to_pylist(), table["extra_columns"].to_pylist()))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("pyarrow")
    write_shards(root / "shards", write_with_pyarrow)
    output = root / "out"
    assert main(["score", "--input", str(root / "shards" / "*.parquet"), "--output", str(output), *RUNNER]) == 0
    return output


@pytest.mark.parametrize("write", [write_with_polars, write_with_duckdb, write_with_pandas])
def test_extra_columns_leave_metrics_byte_identical(score_cli, tmp_path, reference, write):
    write_shards(tmp_path / "shards", write)
    code, output = score_cli([tmp_path / "shards" / "*.parquet"])
    assert code == 0
    assert (output / "metrics.json").read_bytes() == (reference / "metrics.json").read_bytes()
    # The unscored rows keep their extra columns, whatever their Arrow type was.
    assert unscored_extras(output) == unscored_extras(reference)


def test_extra_columns_leave_the_conformance_results(reference):
    expected = load_json(CONFORMANCE / "expected-commit.json")
    assert differences(load_json(reference / "metrics.json"), expected) == []
