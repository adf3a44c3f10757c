"""The exit codes are stated once (litmus_score.exits) and documented as they are."""

import re
from pathlib import Path

from litmus_score.exits import Exit, of_run

REPO = Path(__file__).resolve().parents[1]


def documented() -> dict:
    """code -> meaning, from the table in docs/commands.md."""
    text = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    table = text[text.index("## Exit codes"):]
    return {int(code): meaning for code, meaning in re.findall(r"^\| `(\d+)` \| ([^|]+) \|", table, re.MULTILINE)}


def test_the_table_in_docs_lists_every_exit_code_and_no_other():
    assert sorted(documented()) == sorted(code.value for code in Exit)


def test_the_readme_names_every_exit_code():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sentence = readme[readme.index("Exit codes:"):readme.index("docs/commands.md#exit-codes")]
    assert sorted(int(code) for code in re.findall(r"`(\d+)`", sentence)) == sorted(code.value for code in Exit)


def test_lost_input_takes_precedence_over_any_verdict():
    for verdict in (Exit.OK, Exit.REGRESSION, Exit.WITHHELD):
        assert of_run(True, verdict) == Exit.INCOMPLETE_INPUT
        assert of_run(False, verdict) == verdict


def test_the_airflow_dag_spells_the_verdict_exits_as_they_are():
    # The DAG runs where litmus-score need not be installed: it spells the codes itself.
    source = (REPO / "deploy" / "airflow" / "litmus_nightly.py").read_text(encoding="utf-8")
    names, codes = re.search(r"^(EXIT_\w+(?:, EXIT_\w+)*) = ([\d, ]+)$", source, re.MULTILINE).groups()
    spelled = dict(zip((n.removeprefix("EXIT_") for n in names.split(", ")), map(int, codes.split(", "))))
    assert spelled == {"REGRESSION": Exit.REGRESSION, "INCOMPLETE_INPUT": Exit.INCOMPLETE_INPUT,
                       "WITHHELD": Exit.WITHHELD}
