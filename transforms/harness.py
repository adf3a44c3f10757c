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

    Shards --> Read harness verdicts --(side input)--+
    scored trajectories --> Compare with the harness +--> statistics
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
from transforms.schema import HARNESS_MISUSE, HARNESS_VERDICT
from transforms.shardfiles import opened

ROW = "source_row"
VERDICTS = pa.schema([pa.field(ROW, pa.int64()), pa.field(HARNESS_VERDICT, pa.string()),
                      pa.field(HARNESS_MISUSE, pa.bool_())])
# Ours, against which the harness's verdict is compared: the mode's misuse, and proposal-time misuse.
OURS = ("misuse", "legacy_misuse")


def read_verdicts(shard):
    """A shard's harness verdicts (VERDICTS, rows with one only), or None where it has none.

    A value that is not a boolean is no verdict: null, in its own row."""
    with opened(shard) as handle:
        parquet = pq.ParquetFile(handle)
        if not {HARNESS_VERDICT, HARNESS_MISUSE} <= set(parquet.schema_arrow.names):
            return None
        table = parquet.read(columns=[HARNESS_VERDICT, HARNESS_MISUSE], use_threads=False)
    verdict = table[HARNESS_VERDICT]
    misuse = table[HARNESS_MISUSE]
    if not pa.types.is_string(verdict.type):
        verdict = pa.nulls(len(table), pa.string())
    if not pa.types.is_boolean(misuse.type):
        misuse = pa.nulls(len(table), pa.bool_())
    rows = pa.table([pa.array(np.arange(len(table), dtype=np.int64)), verdict, misuse], schema=VERDICTS)
    return rows.filter(pc.and_(pc.is_valid(rows[HARNESS_VERDICT]), pc.is_valid(rows[HARNESS_MISUSE])))


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


@beam.typehints.with_input_types(pa.Table)
@beam.typehints.with_output_types(dict)
class CompareWithHarness(beam.PTransform):
    """Scored trajectories (schema.TRAJECTORIES tables) -> per-batch statistics of
    agreement with the harness verdicts of `shards` (litmus_score.scoring.metrics form)."""

    def __init__(self, shards):
        super().__init__()
        self._shards = list(shards)

    def expand(self, trajectories: beam.PCollection[pa.Table]) -> beam.PCollection[dict]:
        verdicts = (
            trajectories.pipeline
            | "Shards to read harness verdicts of" >> beam.Create(self._shards, reshuffle=False)
            | "Read harness verdicts" >> beam.ParDo(ReadHarnessVerdictsFn())
        )
        return (
            trajectories
            | "Compare with the harness"
            >> beam.Map(agreement_statistics, beam.pvalue.AsDict(verdicts)).with_output_types(dict)
            | "Keep groups with a harness verdict" >> beam.Filter(bool)
        )
