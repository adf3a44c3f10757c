"""AgentDojo episode results shaped like those real models write, made without a model.

Real runs (gpt-4o-mini on AgentDojo's suites) hold long, varied messages in
many scripts, tool results of many KB, arguments with empty lists and
nulls, calls with and without ids, episodes with no call at all and
errors. `write_episodes` writes such TaskResults documents, as AgentDojo's
logger lays them out (pipeline/suite/user_task/attack/injection_task.json),
from a seed: the same seed, the same bytes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

PIPELINES = ("gpt-4o-mini-2024-07-18", "gpt-4o-mini-2024-07-18-spotlighting_with_delimiting")
SUITES = ("workspace", "banking", "slack", "travel")
TOOLS = ("send_email", "send_money", "get_iban", "read_file", "search_emails", "create_calendar_event",
         "update_scheduled_transaction", "get_channels", "post_webpage", "reserve_hotel", "get_rating_reviews")
# Words of many scripts and the characters JSON escapes (quotes, backslashes, controls, U+2028).
WORDS = ("Überweisung", "naïve", "café", "“quoted”", "—", "日本語のテキスト", "Привет", "emoji 🙂🚀", "ß", "€1.234,56",
         "señor", "ａｂｃ", "שלום", "مرحبا", "ok", "the", "meeting", "invoice", "\u2028", "tab\there", "line\nbreak",
         "back\\slash", '"quote"', "{json}", "[list]", "null", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢")


def _text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _content(text: str) -> list:
    return [{"type": "text", "content": text}]


def _arguments(rng: random.Random) -> dict:
    if rng.random() < 0.2:
        return {}
    arguments = {"recipient": rng.choice(["US133000000121212121212", "mark@example.com", None, ""]),
                 "body": _text(rng, 50, 1500), "subject": _text(rng, 1, 20)}
    if rng.random() < 0.5:
        arguments["attachments"] = [] if rng.random() < 0.6 else [{"type": "file", "file_id": str(rng.randint(0, 99))}]
    if rng.random() < 0.3:
        arguments["cc"] = [] if rng.random() < 0.5 else [None, _text(rng, 1, 3)]
    if rng.random() < 0.3:
        arguments["amount"] = rng.choice([0.01, 100, 1e300, -5, None])
    return arguments


def episode(rng: random.Random, number: int) -> dict:
    """One TaskResults document: a system prompt, a user task, some turns of calls and results, an answer."""
    messages = [{"role": "system", "content": _content(_text(rng, 20, 200))},
                {"role": "user", "content": _content(_text(rng, 5, 100))}]
    for _ in range(rng.choice([0, 0, 1, 2, 3, 5, 8])):
        calls = [{"function": rng.choice(TOOLS), "args": _arguments(rng),
                  "id": None if rng.random() < 0.2 else f"call_{rng.getrandbits(64):x}", "placeholder_args": None}
                 for _ in range(rng.choice([0, 1, 1, 1, 2, 3]))]
        messages.append({"role": "assistant",
                         "content": None if calls and rng.random() < 0.6 else _content(_text(rng, 1, 300)),
                         "tool_calls": calls if calls or rng.random() < 0.5 else None})
        for call in calls:
            error = None if rng.random() < 0.8 else rng.choice(["PermissionError: not allowed",
                                                                 f"ValueError: {_text(rng, 1, 30)}"])
            messages.append({"role": "tool", "content": _content(_text(rng, 100, 4000)), "tool_call_id": call["id"],
                             "tool_call": call, "error": error})
    messages.append({"role": "assistant", "content": _content(_text(rng, 10, 500)), "tool_calls": None})
    injection = rng.choice([None, f"injection_task_{rng.randint(0, 13)}"])
    return {"suite_name": rng.choice(SUITES), "pipeline_name": rng.choice(PIPELINES),
            "user_task_id": f"user_task_{number}", "injection_task_id": injection,
            "attack_type": None if injection is None else "important_instructions",
            "injections": {} if injection is None else {"injection_0": _text(rng, 10, 200)},
            "messages": messages, "error": None if rng.random() < 0.9 else _text(rng, 5, 50),
            "benchmark_version": "v1.2.2", "evaluation_timestamp": "2024-10-01 12:00:00",
            "agentdojo_package_version": "0.1.35", "duration": rng.random() * 30,
            "utility": rng.random() < 0.5, "security": rng.random() < 0.3}


def write_episodes(folder: Path, count: int, seed: int = 0) -> list:
    """Writes `count` episodes under `folder`; their paths."""
    rng = random.Random(seed)
    paths = []
    for number in range(count):
        document = episode(rng, number)
        path = (Path(folder) / document["pipeline_name"] / document["suite_name"] / document["user_task_id"]
                / str(document["attack_type"]) / f"{document['injection_task_id'] or 'none'}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        # AgentDojo writes indented JSON; some writers escape non-ASCII, most do not.
        path.write_text(json.dumps(document, indent=4, ensure_ascii=rng.random() < 0.3), encoding="utf-8")
        paths.append(path)
    return paths
