"""The validity audit of litmus_score.scoring.validity on whole columns, and its statistics.

Context resolution computes the masks (it has the verdicts and the parsed
arguments at hand) in every mode; this module states them and counts them
per (run_id, agent) and tool in the nested form of litmus_score.scoring.metrics.
tests/test_agreement.py proves the counts equal the reference's.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litmus_score.scoring import contract as c
from litmus_score.scoring.validity import FIELDS
from transforms.columnar import FlatCalls, encode, equals, group_codes, is_null


def audit_masks(flat: FlatCalls, proposal, commit, realized: pa.Array, audited: np.ndarray,
                same_arguments: np.ndarray) -> dict:
    """litmus_score.scoring.validity's FIELDS as masks over the calls, set only where `audited`.

    `proposal` and `commit` are the contexts' verdicts (recorded, else the
    policy's), `same_arguments` whether the resolved arguments are equal JSON.
    """
    p, v = proposal.value, commit.value
    no_verdict = is_null(p) | is_null(v)
    real = equals(realized, True)
    commit_deny = equals(v, c.DENY)
    diverged = {
        "no_verdict": no_verdict,
        "verdict_diverged": ~no_verdict & ~equals(pc.equal(p, v), True),
        "arguments_diverged": ~same_arguments,
        "principal_diverged": ~equals(pc.equal(flat.field("proposal.principal"), flat.field("commit.principal")), True),
        "not_realized": ~real,
    }
    masks = {"calls": audited, **{name: audited & mask for name, mask in diverged.items()}}
    masks["faithful"] = audited & ~np.logical_or.reduce(list(diverged.values()))
    masks["verdict_held"] = audited & equals(pc.equal(p, v), True)  # false where either is null
    masks["over_flagged"] = audited & equals(p, c.DENY) & ~(commit_deny & real)
    masks["under_flagged"] = audited & equals(p, c.ALLOW) & commit_deny & real
    return {name: masks[name] for name in FIELDS}


def validity_statistics(batch: pa.RecordBatch, flat: FlatCalls, masks: dict) -> dict:
    """{(run_id, agent): {"validity": {tool: counts}}} of a batch's audited calls."""
    audited = np.flatnonzero(masks["calls"])
    if not len(audited):
        return {}
    group, keys = group_codes(batch.column("run_id"), batch.column("agent"))
    tool, tool_names = encode(flat.field("tool").take(pa.array(audited)))
    cell = group[flat.row[audited]] * len(tool_names) + tool
    width = len(keys) * len(tool_names)
    counts = {name: np.bincount(cell[mask[audited]], minlength=width) for name, mask in masks.items()}
    stats: dict[tuple, dict] = {}
    for slot in np.flatnonzero(counts["calls"]).tolist():
        g, t = divmod(slot, len(tool_names))
        tools = stats.setdefault(keys[g], {"validity": {}})["validity"]
        tools[tool_names[t]] = {name: int(n[slot]) for name, n in counts.items()}
    return stats
