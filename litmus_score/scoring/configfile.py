"""YAML configuration files (policies, thresholds): read safely, validate, name the fault.

Every fault but I/O raises the caller's error class (a ValueError) with one
line that names the file and the field: `policy.yaml: rules[2]
(transfer-over-limit).when[0].gt: Input should be a valid number`.
"""

from __future__ import annotations

import os
import stat
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError


class StrictSafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader (what yaml.safe_load uses), refusing two things it
    accepts silently: a duplicate key (the last would win, losing e.g. a
    whole `rules:` list) and aliases (a few lines can expand into a tree of
    billions of nodes for validation to walk)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases are not allowed", self.peek_event().start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        mapping = super().construct_mapping(node, deep=deep)
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return mapping


def _yaml_message(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        reason = " ".join(part for part in (error.context, error.problem) if part)
        return f"line {mark.line + 1}, column {mark.column + 1}: {reason}"
    return " ".join(str(error).split())


def location(loc: tuple, data: dict) -> str:
    """('rules', 2, 'when', 0, 'gt') -> 'rules[2] (transfer-over-limit).when[0].gt'."""
    text = ""
    for depth, part in enumerate(loc):
        if isinstance(part, int):
            text += f"[{part}]"
            if depth == 1 and loc[0] == "rules":
                rule = data["rules"][part]
                if isinstance(rule, dict) and isinstance(rule.get("id"), str):
                    text += f" ({rule['id']})"
        else:
            text += f".{part}" if text else str(part)
    return text


def validate(model: type[BaseModel], data: Any, source: str, error: type[ValueError], kind: str):
    """`data` validated as `model`; `error` names `source` and each faulty field."""
    if not isinstance(data, dict):
        found = "empty" if data is None else type(data).__name__
        raise error(f"{source}: {kind} must be a mapping, got {found}")
    try:
        return model.model_validate(data)
    except ValidationError as invalid:
        problems = (
            f"{location(problem['loc'], data) or 'document'}: {problem['msg']}"
            for problem in invalid.errors(include_url=False)
        )
        raise error(f"{source}: {'; '.join(problems)}") from None


def read_regular(source: str, error: type[ValueError], max_bytes: int) -> bytes:
    """At most `max_bytes` + 1 bytes of the regular file `source`. Opened
    without blocking and checked before any read: a FIFO, a device or a
    socket given as a configuration file is refused, not waited on."""
    descriptor = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as stream:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            found = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a file"
            raise error(f"{source}: not a regular file ({found})")
        return stream.read(max_bytes + 1)


def load_text(path, error: type[ValueError], max_bytes: int, read=read_regular) -> str:
    """The text of a configuration file of at most `max_bytes`, UTF-8 decoded.
    `read(source, error, max_bytes)` gives at most `max_bytes` + 1 bytes:
    read_regular for a local file; the pipeline passes one for any path
    Beam can read (gs://, s3://), so this module stays free of Beam."""
    source = os.fspath(path)
    raw = read(source, error, max_bytes)
    if len(raw) > max_bytes:
        raise error(f"{source}: larger than {max_bytes} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as undecodable:
        raise error(f"{source}: not UTF-8 ({undecodable.reason} at byte {undecodable.start})") from None


def parse(text: str, source: str, model: type[BaseModel], error: type[ValueError], kind: str):
    """The YAML `text` of the file `source`, validated as `model`."""
    try:
        data = yaml.load(text, Loader=StrictSafeLoader)
    except yaml.YAMLError as malformed:
        raise error(f"{source}: {_yaml_message(malformed)}") from None
    except RecursionError:
        raise error(f"{source}: nested too deeply") from None
    return validate(model, data, source, error, kind)


def load(path, model: type[BaseModel], error: type[ValueError], kind: str, max_bytes: int, read=read_regular):
    """Read a YAML file of at most `max_bytes` (with `read`, as load_text) and validate it as `model`."""
    return parse(load_text(path, error, max_bytes, read), os.fspath(path), model, error, kind)
