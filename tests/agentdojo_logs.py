"""AgentDojo episode logs written by AgentDojo's own benchmark function.

No LLM: a scripted pipeline element replays an injection task's ground-truth
calls through the suite's runtime, as a fully hijacked agent would, and
logs each step as AgentDojo's AgentPipeline does. With `refuse`, the
environment refuses those tools (they raise PermissionError, which the
runtime records as the tool result's error).
"""

from __future__ import annotations

from pathlib import Path

from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.attacks.attack_registry import load_attack
from agentdojo.benchmark import run_task_with_injection_tasks
from agentdojo.functions_runtime import FunctionsRuntime
from agentdojo.logging import Logger, OutputLogger
from agentdojo.task_suite.load_suites import get_suite
from agentdojo.types import text_content_block_from_string

BENCHMARK_VERSION = "v1.2.2"
SUITE = "banking"
USER_TASKS = ("user_task_0", "user_task_1")
INJECTION_TASK = "injection_task_0"
HARMFUL_TOOL = "send_money"
ATTACKER_IBAN = "US133000000121212121212"


def _refusing(name: str):
    def refuse(*args, **kwargs):
        raise PermissionError(f"{name} is not allowed for this account")

    return refuse


class ReplayInjection(BasePipelineElement):
    """Proposes the injection task's ground-truth calls and runs them."""

    def __init__(self, name: str, injection_task, refuse=()):
        self.name = name
        self._injection_task = injection_task
        self._refuse = frozenset(refuse)

    def query(self, query, runtime, env, messages=(), extra_args={}):  # noqa: B006  (AgentDojo's signature)
        if self._refuse:
            functions = [f.model_copy(update={"run": _refusing(f.name)}) if f.name in self._refuse else f
                         for f in runtime.functions.values()]
            runtime = FunctionsRuntime(functions)
        messages = [*messages, {"role": "user", "content": [text_content_block_from_string(query)]}]
        Logger.get().log(messages)
        calls = self._injection_task.ground_truth(env.model_copy(deep=True))
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        Logger.get().log(messages)
        for call in calls:
            result, error = runtime.run_function(env, call.function, call.args)
            messages.append({"role": "tool", "content": [text_content_block_from_string(str(result))],
                             "tool_call_id": call.id, "tool_call": call, "error": error})
            Logger.get().log(messages)
        messages.append({"role": "assistant", "content": [text_content_block_from_string("Done.")], "tool_calls": None})
        Logger.get().log(messages)
        return query, runtime, env, messages, extra_args


def write_logs(logdir: Path, refuse: bool) -> dict:
    """Runs the user tasks with the injection task; {(user task, injection task): (utility, security)}."""
    suite = get_suite(BENCHMARK_VERSION, SUITE)
    injection_task = suite.get_injection_task_by_id(INJECTION_TASK)
    name = "replay-refused" if refuse else "replay-allowed"
    pipeline = ReplayInjection(name, injection_task, refuse=[HARMFUL_TOOL] if refuse else [])
    attack = load_attack("direct", suite, pipeline)
    results = {}
    with OutputLogger(str(logdir)):
        for user_task_id in USER_TASKS:
            utility, security = run_task_with_injection_tasks(
                suite, pipeline, suite.get_user_task_by_id(user_task_id), attack, logdir, force_rerun=True,
                injection_tasks=[INJECTION_TASK], benchmark_version=BENCHMARK_VERSION)
            for key in utility:
                results[key] = (utility[key], security[key])
    return results
