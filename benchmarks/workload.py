"""A benchmark workload whose texts vary as real logs do.

litmus_score/synthetic.py draws trajectories whose verdicts, outcomes and
defects follow the spec (every category and every unscored reason occurs),
but its argument texts come from small vocabularies: about 1,300 distinct
texts per million calls, which flatters anything that caches or dictionary-
encodes. Here every call's JSON texts also carry what real tool calls carry:
a unique request id, a free-text note, a path and an amount, so nearly every
argument text is distinct. Call ids are unique per trajectory, trajectory ids
carry a random token. The defects are synthetic's (about 4% of trajectories:
wrong schema version, null columns and call fields, call_count mismatch,
duplicate call id, steps out of order, truncated, null verdict, malformed
JSON, no commit), plus a few texts over the default 1 MiB bound (too_large).

Kept out, because DuckDB cannot take part in them (see docs/performance.md):
invalid UTF-8 (DuckDB refuses the whole file), and JSON that strict parsers
and DuckDB's json_valid judge differently (json_valid accepts NaN,
Infinity and trailing commas, rejects lone surrogate escapes). Synthetic's
malformed texts include `{"amount": NaN}`; it is replaced here by a text
both reject.

Columns are built as whole Arrow arrays and written shard by shard (one
row group per shard), so memory stays bounded whatever the size.

`imported=True` shapes the same trajectories as an importer writes them
(litmus_score/importers): no recorded verdicts (the policy gives them all),
and every JSON object text written by one serializer (sorted keys,
compact), so the arguments, the proposal's and the commit's resolved
arguments are byte-identical unless the call changed between them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from litmus_score import synthetic
from transforms import schema

# synthetic draws binomial(12, 0.55) calls, a few forced to 0 or raised to 1.
CALLS_PER_TRAJECTORY = 6.5
CALLS_PER_SHARD = 130_000
# One trajectory in this many gets a note beyond the default max_text_bytes.
TOO_LARGE_ONE_IN = 50_000
TOO_LARGE_BYTES = 1024 * 1024 + 512
# NaN is what json_valid accepts and strict JSON does not: swapped for a text both reject.
NAN_TEXT = '{"amount": NaN}'
BOTH_REJECT = '{"amount": 12.5 "currency": "EUR"}'
# Free text, with escapes and non-ASCII as agents write them (all valid JSON inside a string).
WORDS = tuple("""
please clean up the stale staging tables before the quarterly close and notify finance
rotate credentials for service account backup nightly retry after timeout check logs on
host replica primary shard migrate index rebuild cache purge invoice refund vendor payout
customer ticket escalation urgent low-priority draft review approve reject archive export
report summary attached csv json yaml config deploy rollback canary region eu-west-1
us-east-2 ap-south-1 naïve café Zürich São-Paulo 東京 données über résumé \\"quoted\\"
line\\nbreak tab\\tseparated 50% $1,200 #4711 @ops-team v2.3.1 2026-11-30T04:12:55Z
""".split())
NOTE_WORDS = 6
DIRECTORIES = ("srv/app", "var/lib/jobs", "home/deploy", "data/exports", "tmp/agent", "mnt/share/reports")


def _join(*pieces) -> pa.Array:
    return pc.binary_join_element_wise(*pieces, "")


def _varied_fields(rng: np.random.Generator, count: int) -> pa.Array:
    """`"request_id": ..., "note": ..., "source": ..., "cost": ...` per call, nearly all distinct."""
    words = pa.array(WORDS, pa.string())
    note = pc.binary_join_element_wise(
        *(words.take(pa.array(rng.integers(0, len(words), count))) for _ in range(NOTE_WORDS)), " ")
    directory = pa.array(DIRECTORIES).take(pa.array(rng.integers(0, len(DIRECTORIES), count)))
    return _join(
        '"request_id": "req-', pc.cast(pa.array(rng.integers(0, 2**62, count)), pa.string()),
        '", "note": "', note, " ", pc.cast(pa.array(rng.integers(0, 100_000, count)), pa.string()),
        '", "source": "/', directory, "/", pc.cast(pa.array(rng.integers(0, 10**9, count)), pa.string()), ".json",
        '", "cost": ', pc.cast(pa.array(np.round(rng.gamma(2.0, 150.0, count), 2)), pa.string()),
    )


def _with_fields(texts: pa.Array, fields: pa.Array) -> pa.Array:
    """Each text that opens an object gets `fields` as its first keys; others stay as they are."""
    rest = pc.utf8_slice_codeunits(texts, 1)
    empty = pc.match_substring_regex(texts, r"^\{\s*\}")
    extended = _join("{", fields, pc.if_else(empty, "", ", "), rest)
    return pc.if_else(pc.fill_null(pc.starts_with(texts, "{"), False), extended, texts)


def _context(context: pa.StructArray, resolved: pa.Array, fields) -> pa.StructArray:
    children = [resolved if f.name == "resolved_arguments" else context.field(f.name) for f in fields]
    return pa.StructArray.from_arrays(children, fields=list(fields), mask=context.is_null())


def varied_batch(rng: np.random.Generator, first_index: int, size: int) -> pa.Table:
    """synthetic's `mixed` trajectories first_index.. with varied texts."""
    table = synthetic._batch(rng, first_index, size, synthetic.MIXED, None, synthetic.AGENT_PROPENSITY)
    trajectories = table.column("calls").combine_chunks()
    calls = trajectories.values
    count = len(calls)
    fields = _varied_fields(rng, count)
    large = rng.random(count) < (CALLS_PER_TRAJECTORY * TOO_LARGE_ONE_IN) ** -1
    if large.any():
        padding = pa.scalar('"padding": "' + "x" * TOO_LARGE_BYTES + '", ')
        fields = pc.replace_with_mask(fields, pa.array(large), _join(padding, fields.filter(pa.array(large))))
    arguments = calls.field("arguments")
    arguments = pc.if_else(pc.fill_null(pc.equal(arguments, NAN_TEXT), False), BOTH_REJECT, arguments)
    proposal, commit = calls.field("proposal"), calls.field("commit")
    # Unique per trajectory, repeated where synthetic planted a duplicate call id.
    token = pc.cast(pa.array(np.repeat(rng.integers(0, 2**40, size), np.diff(trajectories.offsets))), pa.string())
    call_fields = {
        "call_id": _join("c", token, "-", calls.field("call_id")),
        "arguments": _with_fields(arguments, fields),
        "proposal": _context(proposal, _with_fields(proposal.field("resolved_arguments"), fields),
                             schema.CONTEXT),
        "commit": _context(commit, _with_fields(commit.field("resolved_arguments"), fields), schema.COMMIT),
    }
    calls = pa.StructArray.from_arrays(
        [call_fields.get(f.name, calls.field(f.name)) for f in schema.CALL], fields=list(schema.CALL),
        mask=calls.is_null())
    trajectory_ids = _join(table.column("trajectory_id").combine_chunks(), "-",
                           pc.cast(pa.array(rng.integers(0, 2**32, size)), pa.string()))
    columns = {
        "trajectory_id": trajectory_ids,
        "calls": pa.ListArray.from_arrays(trajectories.offsets, calls, type=schema.TRAJECTORY.field("calls").type,
                                          mask=trajectories.is_null()),
    }
    return pa.Table.from_arrays([columns.get(name, table.column(name)) for name in schema.TRAJECTORY.names],
                                schema=schema.TRAJECTORY)


def _one_serializer(texts: pa.Array) -> pa.Array:
    """JSON object texts written again with sorted keys, compactly; other texts as they are."""
    def rewrite(text):
        try:
            value = orjson.loads(text)
        except (orjson.JSONDecodeError, TypeError):
            return text
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode() if isinstance(value, dict) else text
    return pa.array([rewrite(text) for text in texts.to_pylist()], pa.string())


def imported_batch(table: pa.Table) -> pa.Table:
    """`table` as an importer writes it: no recorded verdicts, one serializer for every argument text."""
    trajectories = table.column("calls").combine_chunks()
    calls = trajectories.values

    def context(name, fields):
        struct = calls.field(name)
        children = {"resolved_arguments": _one_serializer(struct.field("resolved_arguments")),
                    "policy_verdict": pa.nulls(len(struct), pa.string())}
        return pa.StructArray.from_arrays([children.get(f.name, struct.field(f.name)) for f in fields],
                                          fields=list(fields), mask=struct.is_null())

    changed = {"arguments": _one_serializer(calls.field("arguments")),
               "proposal": context("proposal", schema.CONTEXT), "commit": context("commit", schema.COMMIT)}
    calls = pa.StructArray.from_arrays([changed.get(f.name, calls.field(f.name)) for f in schema.CALL],
                                       fields=list(schema.CALL), mask=calls.is_null())
    column = pa.ListArray.from_arrays(trajectories.offsets, calls, type=schema.TRAJECTORY.field("calls").type,
                                      mask=trajectories.is_null())
    return table.set_column(table.schema.get_field_index("calls"), "calls", column)


def generate(directory: str, calls: int, seed: int = 0, imported: bool = False) -> list[str]:
    """Shards of about CALLS_PER_SHARD calls each, about `calls` in all (within 2%); returns their paths."""
    trajectories = math.ceil(calls / CALLS_PER_TRAJECTORY)
    shards = math.ceil(calls / CALLS_PER_SHARD)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard, shard_seed in enumerate(np.random.SeedSequence(seed).spawn(shards)):
        begin, end = shard * trajectories // shards, (shard + 1) * trajectories // shards
        path = out / f"part-{shard:05d}-of-{shards:05d}.parquet"
        table = varied_batch(np.random.default_rng(shard_seed), begin, end - begin)
        pq.write_table(imported_batch(table) if imported else table, str(path))
        paths.append(str(path))
    return paths
