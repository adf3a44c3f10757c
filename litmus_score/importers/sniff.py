"""Which agent-log format a folder or a file holds, guessed from names and
first bytes: what `score --input` suggests (`--input_format`) when a folder
holds no shard, or a file it read is no Parquet, so that a folder of logs is
not only "no .parquet".

A guess, never a decision: nothing is imported on its strength.
"""

from __future__ import annotations

import os
from collections import Counter

# The formats' names for a person.
NAMES = {"inspect": "Inspect AI logs", "agentdojo": "AgentDojo episodes", "otel": "OpenTelemetry (OTLP/JSON) traces"}
# A key each format's JSON writes near its start: an AgentDojo episode's first keys, an OTLP/JSON line's
# top key, an Inspect log header's eval id. The first of them in a file's head names its format.
_MARKERS = {"agentdojo": b'"user_task_id"', "otel": b'"resourceSpans"', "inspect": b'"eval_id"'}
# Bytes of a file read, and files looked at: enough to tell, bounded for a folder of thousands.
HEAD_BYTES = 64 * 1024
MAX_FILES = 100


def guess(path: str) -> str | None:
    """The format a log file's name, or its first bytes, say it is in; None for no format's."""
    name = path.lower()
    if name.endswith(".eval"):  # Inspect's own (zip) log
        return "inspect"
    if not name.endswith((".json", ".jsonl")):
        return None
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return None
    found = {log_format: head.find(marker) for log_format, marker in _MARKERS.items() if marker in head}
    return min(found, key=found.__getitem__) if found else None


def file_hint(path: str) -> str:
    """For a file that is no shard: what log it looks like, naming --input_format; "" for none."""
    log_format = guess(path)
    return f"; it looks like an agent log ({NAMES[log_format]}, --input_format {log_format})" if log_format else ""


def suggestion(folder: str) -> str:
    """What the files of a local `folder` (at any depth, hidden names left out) look like, as the end of
    the line that says it holds no shard, naming --input_format; "" where no file looks like a log."""
    seen: Counter = Counter()
    looked = 0
    for root, folders, files in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith((".", "_")))
        for name in sorted(files):
            if looked == MAX_FILES:
                break
            if not name.startswith((".", "_")):
                looked += 1
                log_format = guess(os.path.join(root, name))
                if log_format is not None:
                    seen[log_format] += 1
    if not seen:
        return ""
    of = f" (of the first {looked} looked at)" if looked == MAX_FILES else ""
    if len(seen) == 1:
        ((log_format, count),) = seen.items()
        return (f", but {count} file(s) that look like {NAMES[log_format]}{of}: score them with "
                f"--input_format {log_format} --policy FILE")
    return (", but files that look like agent logs" + of + ": "
            + ", ".join(f"{count} {NAMES[log_format]} (--input_format {log_format})"
                        for log_format, count in seen.most_common()) + "; a run reads one format")
