"""The report's view of the harness's own verdict beside ours (metrics.json's
`harness_agreement`, per group), for runs whose inputs keep one."""

from __future__ import annotations


def harness_view(groups: list, limit: int) -> dict | None:
    """One row per (group, harness verdict), the first `limit` of them; None when no input keeps a harness verdict."""
    rows = [{"run_id": group["run_id"], "agent": group["agent"], "verdict": name, **block}
            for group in groups for name, block in sorted((group.get("harness_agreement") or {}).items())]
    if not rows:
        return None
    return {"rows": rows[:limit], "left_out": max(0, len(rows) - limit)}
