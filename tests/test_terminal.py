"""What a person sees on the terminal: tables whose columns fit their content, ids that can be found,
a folder of logs recognised, and no output line of any command that can drive the terminal."""

import subprocess
import sys

import pytest

from litmus_score import text
from litmus_score.importers import sniff
from litmus_score.scoring import contract as c
from pipeline import job
from pipeline.cli import main
from pipeline.show import closest_ids
from tests import builders as b
from tests.conftest import RUNNER, load_json

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

# In paths: what a file name may hold (no "/" or NUL) and a glob reads as itself (no "[", "*", "?"): an OSC
# title, BEL, a full reset, a carriage return, a right-to-left override.
HOSTILE = "\x1b]0;pwned\x07\x1bc\r\u202e"
# In data: any text.
HOSTILE_DATA = "\x1b[2J\x1b]0;pwned\x07\r\u202eevil"


def raw_control(output: str) -> list:
    """The lines of `output` holding a character a terminal would act on (a line break ends a line)."""
    return [line for line in output.split("\n") if not line.isprintable()]


# --- tables -----------------------------------------------------------------

def test_a_table_is_as_wide_as_its_content_and_right_aligns_where_asked():
    lines = text.table(("name", "n"), [["a-very-long-agent-name-of-forty-chars-xx", "7"], ["b", "123"]], right={1})
    assert lines == ["name                                        n",
                     "a-very-long-agent-name-of-forty-chars-xx    7",
                     "b                                         123"]


def test_wide_characters_count_two_columns():
    lines = text.table(("agent", "n"), [["模型", "1"], ["ab", "2"]], right={1})
    assert [text.width(line) for line in lines] == [8, 8, 8]


def test_the_summary_shows_agent_names_whole_and_aligned(tmp_path, score_cli, capsys):
    agents = ["gpt-4o-mini-2024-07-18-prompt-injection-defended", "claude-3-5-sonnet-20241022", "m"]
    rows = [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit())), agent=agent) for i, agent in enumerate(agents)]
    b.write_shard(tmp_path / "x.parquet", rows)
    code, _ = score_cli([tmp_path / "x.parquet"])
    assert code == 0
    printed = capsys.readouterr().out.splitlines()
    header = next(line for line in printed if line.startswith("run "))
    table = printed[printed.index(header):printed.index(header) + len(agents) + 2]
    for agent in agents:
        assert any(f" {agent} " in line for line in table)
    # Every row's rate starts under its header, however long the names before it.
    assert all(line[header.index("misuse"):].startswith("  0.0% [") for line in table[1:])


def test_the_unscored_column_sets_call_reasons_apart():
    group = {"unscored": 5, "unscored_by_reason": {c.UNSCORED_CALLS: 3, c.NO_VERDICT: 2, c.NO_COMMIT_CONTEXT: 2,
                                                   c.TRUNCATED: 2, c.MISSING_FIELD: 0}}
    cell = job._unscored(group)
    assert cell == "5 (truncated 2, unscored_calls 3 [by call reason: no_verdict 2, no_commit_context 2])"
    outside = cell.split("[")[0]
    assert not any(reason in outside for reason in c.CALL_REASONS)


# --- show: finding an id ----------------------------------------------------

LONG_RULE = "transfer-over-the-daily-limit-to-a-new-payee"
POLICY = f"""schema: litmus-policy/1
default: allow
rules:
  - {{id: {LONG_RULE}, tool: transfer, when: [{{arg: amount, gt: 100}}], effect: deny}}
"""


@pytest.fixture(scope="module")
def imported_like(tmp_path_factory):
    """A run whose ids are an import's (<eval id>/<sample id>/<epoch>) and whose call ids share a long prefix."""
    root = tmp_path_factory.mktemp("ids")
    amounts = [f'{{"amount": {amount}}}' for amount in (5, 500, 50)]
    calls = [b.call(f"for_tool_call_{i}", i, tool="transfer", arguments=amount, proposal=b.context(None, args=amount),
                    commit_=b.commit(None, args=amount))
             for i, amount in enumerate(amounts)]
    rows = [b.trajectory("Uxa3FwQ9/pay-rent/2", calls),
            b.trajectory("Uxa3FwQ9/pay-rent/1", calls[:1]),
            b.trajectory(f"esc{HOSTILE_DATA}", calls[:1])]
    b.write_shard(root / "a.parquet", rows)
    (root / "policy.yaml").write_text(POLICY)
    out = root / "out"
    assert main(["score", "--input", str(root / "a.parquet"), "--output", str(out), "--policy",
                 str(root / "policy.yaml"), *RUNNER]) == 0
    return str(out)


def show(capsys, *argv):
    code = main(["show", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_id_not_found_names_the_form_of_ids_and_the_closest(imported_like, capsys):
    code, _, err = show(capsys, imported_like, "pay-rent/2")
    assert code == 2 and "no trajectory pay-rent/2" in err
    assert "like Uxa3FwQ9/pay-rent/2" in err or "like Uxa3FwQ9/pay-rent/1" in err
    # The one that ends with what was typed comes first.
    assert "closest: Uxa3FwQ9/pay-rent/2, Uxa3FwQ9/pay-rent/1" in err
    code, out, _ = show(capsys, imported_like, "Uxa3FwQ9/pay-rent/2")
    assert code == 0 and out.startswith("trajectory Uxa3FwQ9/pay-rent/2 ")


def test_an_id_is_found_as_the_terminal_shows_it(imported_like, capsys):
    shown = text.escape(f"esc{HOSTILE_DATA}")
    code, out, _ = show(capsys, imported_like, shown)
    assert code == 0 and out.startswith(f"trajectory {shown} ")


def test_closest_ids_ignore_case_then_take_the_most_alike():
    ids = ["a/None/None", "b/other/1", "traj-0000218", "traj-0001198"]
    assert closest_ids("none/none", ids)[0] == "a/None/None"
    assert closest_ids("traj-218", ids)[:2] == ["traj-0000218", "traj-0001198"]


def test_call_columns_stay_aligned_and_call_ids_whole(imported_like, capsys):
    code, out, _ = show(capsys, imported_like, "Uxa3FwQ9/pay-rent/2")
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("step "))
    rows = lines[lines.index(header) + 1::2]  # a call, then its why
    assert [row.split()[1] for row in rows] == ["for_tool_call_0", "for_tool_call_1", "for_tool_call_2"]
    assert any(f"deny ({LONG_RULE})" in row for row in rows)
    # Each cell starts under its column's header, however long the rule names before it.
    for column in ("tool", "proposal", "commit", "environment", "category"):
        at = header.index(column)
        assert all(row[at - 2:at] == "  " and row[at] != " " for row in rows), column


def test_the_summary_names_trajectories_to_start_from(imported_like, capsys):
    manifest = load_json(f"{imported_like}/manifest.json")
    points = job.first_looks(imported_like, manifest)
    assert points and all(show(capsys, imported_like, trajectory_id)[0] == 0 for _, trajectory_id, _ in points)


# --- a folder of logs -------------------------------------------------------

@pytest.fixture(scope="module")
def log_folders(tmp_path_factory):
    from tests import agentdojo_logs, inspect_logs, otel_logs

    root = tmp_path_factory.mktemp("logs")
    for name in ("inspect", "inspect-json", "agentdojo", "otel"):
        (root / name).mkdir()
    inspect_logs.five_calls_log(root / "inspect")
    inspect_logs.five_calls_log(root / "inspect-json", log_format="json")
    agentdojo_logs.write_logs(root / "agentdojo", refuse=True)
    otel_logs.write_trace_file(root / "otel" / "traces.jsonl")
    return root


@pytest.mark.parametrize("log_format, folder", [("inspect", "inspect"), ("inspect", "inspect-json"),
                                                ("agentdojo", "agentdojo"), ("otel", "otel")])
def test_a_folder_of_logs_given_as_shards_is_named_with_its_format(log_folders, tmp_path, capsys, log_format, folder):
    assert main(["score", "--input", str(log_folders / folder), "--output", str(tmp_path / "o"), *RUNNER]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "holds no .parquet file" in line and f"--input_format {log_format} --policy FILE" in line
    assert sniff.NAMES[log_format] in line and not (tmp_path / "o").exists()


def test_a_log_file_read_as_a_shard_is_named_with_its_format(log_folders, score_cli, capsys):
    code, _ = score_cli([log_folders / "inspect" / "*.eval", log_folders / "otel" / "*.jsonl"])
    assert code == 4
    errors = [line for line in capsys.readouterr().out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2 and all(" unreadable: " in line for line in errors)
    for line, log_format in zip(errors, ("inspect", "otel")):  # the manifest's order: by path
        assert line.endswith(f", --input_format {log_format})"), line


def test_files_of_no_format_are_not_guessed(tmp_path):
    (tmp_path / "notes.json").write_text('{"eval": "not a log"}')
    (tmp_path / "README.md").write_text("eval_id")
    assert sniff.suggestion(str(tmp_path)) == ""


# --- every command's output lines -------------------------------------------

@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A root whose files are named with control characters, and shards whose data holds them."""
    from tests import otel_logs

    root = tmp_path_factory.mktemp("hostile")
    calls = b.calls_of(("deny", b.commit("allow")), ("allow", b.commit()))
    calls[0]["tool"] = f"tool{HOSTILE_DATA}"
    rows = [b.trajectory(f"t{i}{HOSTILE_DATA}", calls, agent=f"agent{HOSTILE_DATA}", run_id=f"run{HOSTILE_DATA}",
                         task_id=HOSTILE_DATA)
            for i in range(3)]
    rows.append(b.trajectory(f"cut{HOSTILE_DATA}", [], episode_outcome="truncated", agent=f"agent{HOSTILE_DATA}"))
    for night in ("2026-11-30", "2026-12-01"):
        (root / f"in{HOSTILE}" / night).mkdir(parents=True)
        b.write_shard(root / f"in{HOSTILE}" / night / f"part{HOSTILE}.parquet", rows)
    policy = root / f"policy{HOSTILE}.yaml"
    policy.write_text("schema: litmus-policy/1\ndefault: allow\nrules:\n  - {id: r1, tool: write_file, effect: deny}\n")
    candidate = root / f"candidate{HOSTILE}.yaml"
    candidate.write_text("schema: litmus-policy/1\ndefault: deny\n")
    (root / f"broken{HOSTILE}.yaml").write_text(f"schema: litmus-policy/1\ndefault: allow\n{HOSTILE_DATA}: 1\n")
    (root / f"logs{HOSTILE}").mkdir()
    otel_logs.write_trace_file(root / f"logs{HOSTILE}" / f"traces{HOSTILE}.jsonl")
    return root


def commands(root) -> list:
    """(argv, the marker its output must show escaped): every command, on paths, flags and data with control
    characters, succeeding and refused."""
    shards = str(root / f"in{HOSTILE}" / "2026-12-01")
    out, old = str(root / f"out{HOSTILE}"), str(root / f"old{HOSTILE}")
    policy, logs = str(root / f"policy{HOSTILE}.yaml"), str(root / f"logs{HOSTILE}")
    nights = str(root / f"nights{HOSTILE}")
    marked = text.escape(HOSTILE)
    return [
        (["generate", "--output", str(root / f"gen{HOSTILE}"), "--trajectories", "20", "--shards", "1"], marked),
        (["score", "--input", shards, "--output", old, *RUNNER], text.escape(HOSTILE_DATA)),
        (["score", "--input", shards, "--output", out, "--policy", policy, *RUNNER], marked),
        (["score", "--input", shards, "--output", out, *RUNNER], marked),  # refused: it holds a run
        (["score", "--input", str(root / f"none{HOSTILE}"), "--output", str(root / "x"), *RUNNER], marked),
        (["score", "--input", shards, "--output", str(root / "x"), f"--bogus{HOSTILE}=1", *RUNNER], marked),
        (["score", "--input", logs, "--output", str(root / "x"), *RUNNER], marked),  # logs as shards
        (["score", "--input_format", "otel", "--input", logs, "--output", str(root / f"scored-logs{HOSTILE}"),
          "--policy", policy, *RUNNER], marked),
        (["import", "otel", logs, "--output", str(root / f"imported{HOSTILE}"), *RUNNER], marked),
        (["show", out, f"t0{HOSTILE_DATA}"], text.escape(HOSTILE_DATA)),
        (["show", out, f"cut{HOSTILE_DATA}"], text.escape(HOSTILE_DATA)),
        (["show", out, f"missing{HOSTILE}"], marked),
        (["show", str(root / f"nothing{HOSTILE}"), "t0"], marked),
        (["audit", shards, *RUNNER], text.escape(HOSTILE_DATA)),
        (["audit", shards, "--policy", str(root / f"broken{HOSTILE}.yaml"), *RUNNER], marked),
        (["compare", out, old, "--output", str(root / f"cmp{HOSTILE}")], marked),
        (["whatif", "--input", shards, "--output", str(root / f"whatif{HOSTILE}"), "--policy", policy,
          "--candidate", str(root / f"candidate{HOSTILE}.yaml"), *RUNNER], marked),
        (["nightly", "--date", "2026-11-30", "--input", str(root / f"in{HOSTILE}" / "{date}"),
          "--output_root", nights, *RUNNER], marked),
        (["nightly", "--date", "2026-12-01", "--input", str(root / f"in{HOSTILE}" / "{date}"),
          "--output_root", nights, *RUNNER], text.escape(HOSTILE_DATA)),
        (["nightly", "--date", f"2026-12-01{HOSTILE}", "--input", shards, "--output_root", nights], marked),
        (["trend", nights], marked),
        (["trend", nights, "--nights", HOSTILE], marked),
        (["policy", "check", policy], marked),
        (["policy", "check", str(root / f"broken{HOSTILE}.yaml")], marked),
        (["demo", "--output", str(root / f"demo{HOSTILE}"), *RUNNER], marked),
        ([f"command{HOSTILE}"], marked),
    ]


def run_command(argv) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse's usage errors
        return stop.code


def test_no_output_line_of_any_command_holds_a_control_character(hostile, capfd):
    for argv, marker in commands(hostile):
        run_command(argv)
        captured = capfd.readouterr()
        printed = captured.out + captured.err
        assert not raw_control(printed), (argv[0], raw_control(printed)[:3])
        assert marker in printed, (argv, printed[-2000:])


def test_through_the_launcher_log_lines_and_messages_are_escaped(hostile, tmp_path):
    # The real entry point: the launcher, its child, Python's logging (a shard that is no Parquet is logged).
    shards = hostile / f"in{HOSTILE}" / "2026-12-01"
    (shards / f"broken{HOSTILE}.parquet").write_bytes(b"PAR1 not parquet PAR1")
    try:
        for argv in (["score", "--input", str(shards), "--output", str(tmp_path / f"out{HOSTILE}"), *RUNNER],
                     ["show", str(tmp_path / f"out{HOSTILE}"), f"t1{HOSTILE_DATA}"]):
            done = subprocess.run([sys.executable, "-m", "pipeline", *argv], capture_output=True, timeout=300)
            printed = done.stdout.decode() + done.stderr.decode()
            assert done.returncode in (0, 4) and not raw_control(printed), raw_control(printed)[:3]
            assert text.escape(HOSTILE) in printed or text.escape(HOSTILE_DATA) in printed
    finally:
        (shards / f"broken{HOSTILE}.parquet").unlink()
