"""Where an Inspect .json log's sample records lie, found without parsing the
document whole: a .json log is one JSON object whose `samples` array holds
every sample, and parsed whole it takes about eight times its size in
memory. The scan reads the file a chunk at a time and finds, with numpy over
the chunk's bytes, its quotes that are not escaped (so which bytes are in
strings) and its brackets outside strings (so each one's depth); it holds
one chunk and the span of each record, and each record is then read and
parsed on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The scan's working memory is about eight times a chunk (its masks and the positions of its quotes).
CHUNK_BYTES = 4 * 2**20
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_SAMPLES_KEY = b'"samples"'


@dataclass(frozen=True)
class Layout:
    """A .json log's header, the document with its samples array taken out
    (bytes, to parse), and the (start, stop) byte span of each element of
    that array that is an object or an array, in the file's order."""

    header: bytes
    spans: list


@dataclass
class _State:
    """What the scan carries from one chunk to the next."""

    depth: int = 0
    in_string: bool = False
    backslashes: int = 0  # the backslashes that end the last chunk (inside a string: they may escape a quote)


def _chunk_events(data: bytes, base: int, state: _State) -> list:
    """(position, kind) of the chunk's events, in order: "string" where a
    string begins at depth 1, "open"/"close" where a bracket outside strings
    enters or leaves depth 1, 2 or 3 (the document, its keys' values, the
    samples' records); `state` is updated to the chunk's end."""
    raw = np.frombuffer(data, np.uint8)
    quotes = np.flatnonzero(raw == _QUOTE)
    # A quote after an odd run of backslashes is escaped. Each run, by where it ends; a run that
    # begins the chunk continues the last chunk's.
    slashes = np.flatnonzero(raw == _BACKSLASH)
    run_index = np.maximum.accumulate(np.where(np.diff(slashes, prepend=-2) != 1, np.arange(len(slashes)), 0))
    run_start = slashes[run_index]
    last = np.searchsorted(slashes, quotes) - 1  # the last backslash before each quote
    adjacent = last >= 0
    adjacent[adjacent] = slashes[last[adjacent]] == quotes[adjacent] - 1
    run = np.zeros(len(quotes), np.int64)
    run[adjacent] = quotes[adjacent] - run_start[last[adjacent]]
    from_start = quotes == 0
    from_start[adjacent] = run_start[last[adjacent]] == 0
    run[from_start] += state.backslashes
    quotes = quotes[run % 2 == 0]
    # In a string from a quote that opens one to the quote that closes it.
    opens_string = (np.arange(len(quotes)) % 2 == 0) != state.in_string
    opening = (raw == ord("[")) | (raw == ord("{"))
    brackets = np.flatnonzero(opening | (raw == ord("]")) | (raw == ord("}")))
    quotes_before = np.searchsorted(quotes, brackets)
    outside = (quotes_before % 2 == 1) == state.in_string
    brackets = brackets[outside]
    steps = np.where(opening[brackets], 1, -1)
    depth_after = state.depth + np.cumsum(steps)
    levels = np.where(steps > 0, depth_after, depth_after + 1)  # the depth a bracket opens or closes
    events = [(int(at), "open" if step > 0 else "close", int(after))
              for at, step, after in zip(brackets[levels <= 3], steps[levels <= 3], depth_after[levels <= 3])]
    starts = quotes[opens_string]
    depth_at = state.depth + np.concatenate(([0], np.cumsum(steps)))[np.searchsorted(brackets, starts)]
    events += [(int(at), "string", 1) for at in starts[depth_at == 1]]
    events.sort()
    state.depth = int(depth_after[-1]) if len(depth_after) else state.depth
    state.in_string = bool(len(quotes) % 2) != state.in_string
    ends_in_slashes = len(slashes) and slashes[-1] == len(raw) - 1
    state.backslashes = (int(len(raw) - run_start[-1]) + (state.backslashes if run_start[-1] == 0 else 0)
                         if ends_in_slashes else 0)
    return [(base + at, kind, depth) for at, kind, depth in events]


def layout(handle, chunk_bytes: int | None = None) -> Layout:
    """The Layout of the .json log open as `handle` (binary, seekable).
    ValueError where the document ends inside a string or a bracket, or has
    two `samples` arrays; other faults of the JSON are its header's parser's to name."""
    spans: list = []
    state = _State()
    key, element = None, None  # key: where a "samples" at depth 1 begins
    array: list | None = None  # [where its key begins, where the array ends (None: not yet)]
    base = 0
    while chunk := handle.read(chunk_bytes or CHUNK_BYTES):
        after_chunk = handle.tell()
        for at, kind, depth in _chunk_events(chunk, base, state):
            if kind == "string":  # a key, or a value: a value "samples" is followed by a key before any bracket
                handle.seek(at)
                key = at if handle.read(len(_SAMPLES_KEY)) == _SAMPLES_KEY else None
            elif kind == "open":
                if depth == 2 and key is not None:
                    if array is not None:
                        raise ValueError("the log has two samples arrays")
                    array = [key, None]
                elif depth == 3 and array is not None and array[1] is None:
                    element = at
                key = None
            elif depth == 2 and element is not None:
                spans.append((element, at + 1))
                element = None
            elif depth == 1 and array is not None and array[1] is None:
                array[1] = at + 1
            elif depth < 0:
                raise ValueError(f"a bracket closes nothing at byte {at}")
        handle.seek(after_chunk)
        base += len(chunk)
    if state.in_string:
        raise ValueError("the log ends inside a string")
    if state.depth != 0:
        raise ValueError("the log ends inside an object or array")
    return Layout(_header(handle, array), spans)


def _header(handle, array: list | None) -> bytes:
    """The document's bytes without its samples array and the key that names it."""
    handle.seek(0)
    if array is None:
        return handle.read()
    key, stop = array
    before = handle.read(key).rstrip()
    handle.seek(stop)
    after = handle.read().lstrip()
    if before.endswith(b","):
        before = before[:-1]
    elif after.startswith(b","):  # samples was the first key
        after = after[1:]
    return before + after
