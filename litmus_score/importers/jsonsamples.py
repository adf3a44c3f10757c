"""Where an Inspect .json log's sample records lie, found without parsing the
document whole: a .json log is one JSON object whose `samples` array holds
every sample, and parsed whole it takes about eight times its size in
memory. The scan reads the file a chunk at a time and finds, with numpy over
the chunk's bytes, its quotes that are not escaped (so which bytes are in
strings) and its brackets outside strings (so each one's depth); it holds
one chunk and the span of each record, and each record is then read and
parsed on its own. Every element of the array has its span, a sample record
or not (a number, a string: the importer counts it), and the key is found
however it is spelled (`"sampl\\u0065s"` is `samples`, as a JSON parser reads it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

# The scan's working memory is about eight times a chunk (its masks and the positions of its quotes).
CHUNK_BYTES = 4 * 2**20
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_SAMPLES_KEY = b'"samples"'
# The longest spelling of the key: every letter a \uXXXX escape.
_KEY_WINDOW = 2 + 6 * len("samples")


@dataclass(frozen=True)
class Layout:
    """A .json log's header, the document with its samples array taken out
    (bytes, to parse), and the (start, stop) byte span of each element of
    that array, in the file's order: an object or an array from its bracket
    to its bracket, any other value with the white space around it."""

    header: bytes
    spans: list


@dataclass
class _State:
    """What the scan carries from one chunk to the next."""

    depth: int = 0
    in_string: bool = False
    backslashes: int = 0  # the backslashes that end the last chunk (inside a string: they may escape a quote)


def _chunk_events(data: bytes, base: int, state: _State) -> list:
    """(position, kind, depth) of the chunk's events, in order: "string" where a
    string begins at depth 1, "open"/"close" where a bracket outside strings
    enters or leaves depth 1, 2 or 3 (the document, its keys' values, the
    samples' records), "comma" where a comma outside strings separates the
    elements of a value at depth 2; `state` is updated to the chunk's end."""
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
    depth_between = np.concatenate(([state.depth], depth_after))  # before each bracket, and after the last
    events += [(int(at), "string", 1) for at in starts[depth_between[np.searchsorted(brackets, starts)] == 1]]
    # Commas are looked for only where the depth is 2 (between the records: few bytes), then
    # kept where they lie outside strings.
    stretch_starts = np.concatenate(([0], brackets + 1))[depth_between == 2]
    stretch_ends = np.append(brackets, len(raw))[depth_between == 2]
    lengths = stretch_ends - stretch_starts
    within = (np.repeat(stretch_starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
              + np.arange(lengths.sum()))
    commas = within[raw[within] == ord(",")]
    commas = commas[(np.searchsorted(quotes, commas) % 2 == 1) == state.in_string]
    events += [(int(at), "comma", 2) for at in commas]
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
    key = None  # where a "samples" at depth 1 begins
    array: list | None = None  # [where its key begins, where the array ends (None: not yet)]
    value_start = 0  # in the samples array: where the element being scanned begins
    record: int | tuple | None = None  # where that element's object or array begins, then its span
    base = 0

    def end_value(at: int, after_comma: bool) -> None:
        """Adds the span of the samples array's element that ends at byte `at`."""
        nonlocal record
        if record is not None:
            spans.append(record)
            record = None
        elif spans or after_comma or not _blank(handle, value_start, at):  # `[ ]` holds no element
            spans.append((value_start, at))

    while chunk := handle.read(chunk_bytes or CHUNK_BYTES):
        after_chunk = handle.tell()
        for at, kind, depth in _chunk_events(chunk, base, state):
            scanning = array is not None and array[1] is None
            if kind == "string":  # a key, or a value: a value "samples" is followed by a key before any bracket
                key = at if _is_samples_key(handle, at) else None
            elif kind == "comma":
                if scanning:
                    end_value(at, after_comma=True)
                    value_start = at + 1
            elif kind == "open":
                if depth == 2 and key is not None:
                    if array is not None:
                        raise ValueError("the log has two samples arrays")
                    handle.seek(at)
                    if handle.read(1) != b"[":
                        raise ValueError("the log's samples is not an array")
                    array, value_start = [key, None], at + 1
                elif depth == 3 and scanning:
                    record = at
                key = None
            elif depth == 2 and scanning and record is not None:
                record = (record, at + 1)
            elif depth == 1 and scanning:
                end_value(at, after_comma=False)
                array[1] = at + 1  # type: ignore[index]
            elif depth < 0:
                raise ValueError(f"a bracket closes nothing at byte {at}")
        handle.seek(after_chunk)
        base += len(chunk)
    if state.in_string:
        raise ValueError("the log ends inside a string")
    if state.depth != 0:
        raise ValueError("the log ends inside an object or array")
    return Layout(_header(handle, array), spans)


def _is_samples_key(handle, at: int) -> bool:
    """Whether the string that begins at byte `at` is "samples", escapes decoded."""
    handle.seek(at)
    window = handle.read(_KEY_WINDOW)
    if window.startswith(_SAMPLES_KEY):
        return True
    end = window.find(b'"', 1)  # an escaped quote: a string that holds one is not "samples"
    if end < 0 or b"\\" not in window[:end]:
        return False
    try:
        return json.loads(window[:end + 1]) == "samples"
    except ValueError:
        return False


def _blank(handle, start: int, stop: int) -> bool:
    """Whether bytes [start, stop) are JSON white space only."""
    if stop - start > 64:
        return False
    handle.seek(start)
    return not handle.read(stop - start).strip(b" \t\r\n")


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
