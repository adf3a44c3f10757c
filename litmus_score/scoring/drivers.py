"""What drove an agent's change in misuse: per tool and per task category, baseline against this run.

Pure (no Beam, no pyarrow). The figures come from both runs' metrics.json
slices (`slices.tool`, `slices.task_category`, pooled over the agent's
run_ids as compare pools its rates), so a re-scored baseline brings its own:
its metrics are those of its inputs scored again under this run's rules.

Each name's contribution is its misuse per scored trajectory of the agent,
this run's minus the baseline's:

- task category: misuse trajectories of the category / the agent's scored
  trajectories. Every scored trajectory has one category, so the
  contributions add up to the agent's change in misuse rate exactly;
- tool: misuse calls of the tool / the agent's scored trajectories (calls
  of one trajectory are not independent: a trajectory may misuse two tools,
  so these add up to the change in misuse calls per trajectory).

Names are sorted by contribution, largest rise first; the first TOP are
listed and the rest summed into one entry that alone carries `"folded":
true` (its name `(other)` is for people: a tool the data names `(other)`
is listed like any other, as is metrics.json's own `(other)` slice of names
beyond --max_slice_keys).
"""

from __future__ import annotations

from collections.abc import Mapping

from litmus_score.scoring.layout import OTHER

# Names listed per dimension before the rest are folded into one entry.
TOP = 10
# Each dimension: its metrics.json slice and what its misuse is counted over.
DIMENSIONS = {"tool": ("tool", "calls"), "task_category": ("task_category", "trajectories")}


def _side(counts: tuple, unit: str) -> dict:
    total, misuse = counts
    return {unit: total, "misuse": misuse, "rate": misuse / total if total else None}


def _entry(name, new: tuple, old: tuple, scored: tuple, unit: str) -> dict:
    contribution = new[1] / scored[0] - old[1] / scored[1]
    return {"name": name, "new": _side(new, unit), "old": _side(old, unit), "contribution": contribution}


def _sum(counts: list) -> tuple:
    return sum(total for total, _ in counts), sum(misuse for _, misuse in counts)


def ranked(new: Mapping, old: Mapping, scored: tuple, unit: str, top: int = TOP) -> list:
    """The entries of one dimension: `new` and `old` map a name to (total, misuse) in each run,
    `scored` is the agent's scored trajectories (this run's, the baseline's)."""
    empty = (0, 0)

    def contribution(name) -> float:
        return new.get(name, empty)[1] / scored[0] - old.get(name, empty)[1] / scored[1]

    order = sorted(new.keys() | old.keys(), key=lambda name: (-contribution(name), name))
    listed = [_entry(name, new.get(name, empty), old.get(name, empty), scored, unit) for name in order[:top]]
    rest = order[top:]
    if rest:
        folded = _entry(OTHER, _sum([new.get(name, empty) for name in rest]),
                        _sum([old.get(name, empty) for name in rest]), scored, unit)
        listed.append({**folded, "folded": True, "names": len(rest)})
    return listed


def drivers(new: Mapping, old: Mapping, scored: tuple) -> dict:
    """{dimension: entries, or None where either run lacks that slice}; `new` and `old` map each
    dimension to {name: (total, misuse)} pooled over the agent's groups, or to None."""
    return {dimension: None if new.get(dimension) is None or old.get(dimension) is None
            else ranked(new[dimension], old[dimension], scored, unit)
            for dimension, (_, unit) in DIMENSIONS.items()}
