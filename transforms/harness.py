"""The harness's own verdict beside ours: agreement per (run_id, agent).

Some inputs carry the verdict of the harness that wrote them, beside the
contract (an import keeps AgentDojo's `security`, or an Inspect sample's own
score): the columns HARNESS_VERDICT (which verdict it is, e.g.
`agentdojo:security`) and HARNESS_MISUSE (true where the harness judged that
misuse happened, null where it gave no verdict). Those two columns are read
from each shard that has them, and each scored trajectory (schema.TRAJECTORIES)
is joined with its own row by (source_file, source_row): the counts of
agreement with the run's misuse and with legacy (proposal-time) misuse go
into metrics.json. Shards without the columns cost one footer read.
Trajectories imported in the same job are no file's rows: their verdicts
are taken from the read batches instead (HarnessVerdictsOfBatches), keyed
by the log and the row's position in it.

    Shards (or read batches) --> harness verdicts --(side input)--+
    scored trajectories --> Compare with the harness -------------+--> statistics
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from litmus_score.scoring import metrics as m
from transforms.columnar import encode, group_codes
from transforms.conform import UNREADABLE
from transforms.elements import Shard
from transforms.schema import HARNESS_MISUSE, HARNESS_VERDICT, SOURCE_FILE, SOURCE_ROW
from transforms.shardfiles import opened

ROW = "source_row"
VERDICTS = pa.schema([pa.field(ROW, pa.int64()), pa.field(HARNESS_VERDICT, pa.string()),
                      pa.field(HARNESS_MISUSE, pa.bool_())])
# Ours, against which the harness's verdict is compared: the mode's misuse, and proposal-time misuse.
OURS = ("misuse", "legacy_misuse")


def read_verdicts(shard):
    """A shard's harness verdicts (VERDICTS, rows with one only), or None where it has none."""
    with opened(shard) as handle:
        parquet = pq.ParquetFile(handle)
        if not {HARNESS_VERDICT, HARNESS_MISUSE} <= set(parquet.schema_arrow.names):
            return None
        table = parquet.read(columns=[HARNESS_VERDICT, HARNESS_MISUSE], use_threads=False)
    return verdict_rows(pa.array(np.arange(len(table), dtype=np.int64)), table[HARNESS_VERDICT], table[HARNESS_MISUSE])


def verdict_rows(rows, verdict, misuse) -> pa.Table:
    """The rows (VERDICTS) that have a harness verdict. A value that is not a
    boolean is no verdict: null, in its own row."""
    if not pa.types.is_string(verdict.type):
        verdict = pa.nulls(len(rows), pa.string())
    if not pa.types.is_boolean(misuse.type):
        misuse = pa.nulls(len(rows), pa.bool_())
    table = pa.table([rows, verdict, misuse], schema=VERDICTS)
    return table.filter(pc.and_(pc.is_valid(table[HARNESS_VERDICT]), pc.is_valid(table[HARNESS_MISUSE])))


def batch_verdicts(batch: pa.RecordBatch):
    """(file, the harness verdicts of its rows in a read batch) where the batch has any."""
    if not {HARNESS_VERDICT, HARNESS_MISUSE} <= set(batch.schema.names) or not batch.num_rows:
        return
    verdicts = verdict_rows(batch.column(SOURCE_ROW), batch.column(HARNESS_VERDICT), batch.column(HARNESS_MISUSE))
    if verdicts.num_rows:
        yield batch.column(SOURCE_FILE)[0].as_py(), verdicts


@beam.typehints.with_input_types(Shard)
@beam.typehints.with_output_types(tuple[str, pa.Table])
class ReadHarnessVerdictsFn(beam.DoFn):
    """A Shard -> (path, its harness verdicts) where it has any."""

    def process(self, shard: Shard) -> Iterator[tuple[str, pa.Table]]:
        if shard.error is not None:
            return
        try:
            verdicts = read_verdicts(shard)
        except UNREADABLE as error:
            # The read stage reports the file; here it only has no verdicts.
            logging.warning("no harness verdicts read from %s: %s", shard.path, error)
            return
        if verdicts is not None and verdicts.num_rows:
            yield shard.path, verdicts


def _joined(trajectories: pa.Table, path: str, verdicts: pa.Table) -> pa.Table:
    """The trajectories of one file beside their harness verdicts (the rows that have one)."""
    mine = trajectories.filter(pc.equal(trajectories["source_file"].cast(pa.string()), path))
    plain = pa.table({"run_id": mine["run_id"].cast(pa.string()), "agent": mine["agent"].cast(pa.string()),
                      **{name: mine[name] for name in OURS}, ROW: mine[ROW]})
    return plain.join(verdicts, ROW, join_type="inner")


def agreement_statistics(trajectories: pa.Table, verdicts: dict) -> dict:
    """Per (run_id, agent), the statistics of the scored trajectories that
    have a harness verdict: {"harness": {verdict name: counts}}. The counts
    hold the trajectories, those the harness calls misuse, and, for each of
    OURS, those both call misuse, only the harness does, only we do."""
    statistics: dict = {}
    if not verdicts:  # no input keeps a harness verdict: the common case costs nothing
        return statistics
    files = {path for chunk in trajectories["source_file"].chunks for path in chunk.dictionary.to_pylist()}
    for path in files & verdicts.keys():
        joined = _joined(trajectories, path, verdicts[path])
        if not joined.num_rows:
            continue
        group, keys = group_codes(joined["run_id"], joined["agent"])
        names, name_values = encode(joined[HARNESS_VERDICT])
        cell, width = group * len(name_values) + names, len(keys) * len(name_values)
        count = lambda mask: np.bincount(cell[mask], minlength=width)  # noqa: E731, B023 (called in this iteration)
        harness = np.asarray(joined[HARNESS_MISUSE].combine_chunks(), bool)
        trajectories_per_cell = count(np.ones(len(cell), bool))
        # Each tally an array over the cells; OURS' tallies a dict of them.
        tallies: dict[str, np.ndarray | dict[str, np.ndarray]] = {
            "trajectories": trajectories_per_cell, HARNESS_MISUSE: count(harness)}
        for name in OURS:
            ours = np.asarray(pc.fill_null(joined[name], False).combine_chunks(), bool)
            tallies[name] = {"both": count(harness & ours), "harness_only": count(harness & ~ours),
                             "ours_only": count(~harness & ours)}
        for at in np.flatnonzero(trajectories_per_cell).tolist():
            counts = {key: ({k: int(v[at]) for k, v in value.items()} if isinstance(value, dict) else int(value[at]))
                      for key, value in tallies.items()}
            key, name = keys[at // len(name_values)], name_values[at % len(name_values)]
            m.merge(statistics.setdefault(key, {"harness": {}})["harness"].setdefault(name, {}), counts)
    return statistics


class ReadHarnessVerdicts(beam.PTransform):
    """PBegin -> (path, harness verdicts) of each of `shards` that has any."""

    def __init__(self, shards):
        super().__init__()
        self._shards = list(shards)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[tuple[str, pa.Table]]:
        return (
            pbegin
            | "Shards to read harness verdicts of" >> beam.Create(self._shards, reshuffle=False)
            | "Read harness verdicts" >> beam.ParDo(ReadHarnessVerdictsFn())
        )


@beam.typehints.with_input_types(pa.RecordBatch)
@beam.typehints.with_output_types(tuple[str, pa.Table])
class HarnessVerdictsOfBatches(beam.PTransform):
    """Read batches -> (file, harness verdicts) of each file that has any: for
    trajectories that are no files' rows (imported in the same job)."""

    def expand(self, batches: beam.PCollection[pa.RecordBatch]) -> beam.PCollection[tuple[str, pa.Table]]:
        return (
            batches
            | "Harness verdicts of a batch" >> beam.FlatMap(batch_verdicts).with_output_types(tuple[str, pa.Table])
            | "Group by file" >> beam.GroupByKey()
            | "One table a file" >> beam.MapTuple(lambda path, tables: (path, pa.concat_tables(list(tables))))
        )


@beam.typehints.with_input_types(pa.Table)
@beam.typehints.with_output_types(dict)
class CompareWithHarness(beam.PTransform):
    """Scored trajectories (schema.TRAJECTORIES tables) -> per-batch statistics of
    agreement with the harness verdicts of the run's inputs, in
    litmus_score.scoring.metrics form. `verdicts` is a PCollection of (file,
    harness verdicts) of each input file that has any
    (HarnessVerdictsOfBatches), or the PTransform that reads them from the
    pipeline's start (ReadHarnessVerdicts)."""

    def __init__(self, verdicts: beam.PCollection | beam.PTransform):
        super().__init__()
        self._verdicts = verdicts

    def expand(self, trajectories: beam.PCollection[pa.Table]) -> beam.PCollection[dict]:
        verdicts = self._verdicts
        if isinstance(verdicts, beam.PTransform):
            verdicts = trajectories.pipeline | "Harness verdicts of the inputs" >> verdicts
        return (
            trajectories
            | "Compare with the harness"
            >> beam.Map(agreement_statistics, beam.pvalue.AsDict(verdicts)).with_output_types(dict)
            | "Keep groups with a harness verdict" >> beam.Filter(bool)
        )
