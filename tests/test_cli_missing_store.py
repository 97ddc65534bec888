"""The commands that read an MLflow store refuse a ``--tracking-uri`` sqlite file that does not
exist, in one line and without creating it (MLflow would make an empty ``mlruns.db`` and its
``.lock`` and then say the run is not there)."""

from __future__ import annotations

import pytest

from rag_experiments.cli import main
from rag_experiments.common.uri import require_existing_store
from rag_experiments.errors import TrackingError

READ_COMMANDS = {
    "compare": (["compare", "a", "b"], 1),
    "rerun": (["rerun", "abc"], 1),
    "report": (["report", "abc"], 1),
    "export": (["export", "abc", "--format", "ragas", "--out", "x"], 1),
    "merge": (["merge", "abc"], 1),
    "grade-sheet": (["grade-sheet", "abc"], 1),
    "gate": (["gate", "abc"], 2),  # gate's input errors exit 2: 1 means a rule failed
    "promote": (["promote", "abc"], 2),
}


@pytest.mark.slow  # the first one imports MLflow and the commands (~10 s here)
@pytest.mark.parametrize(("argv", "code"), READ_COMMANDS.values(), ids=READ_COMMANDS.keys())
def test_a_read_command_in_an_empty_folder_refuses_and_creates_nothing(
    argv, code, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == code
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"rag-exp {argv[0]}: error: no MLflow store here: {tmp_path / 'mlruns.db'} does not "
        "exist; pass --tracking-uri (the sqlite:///… file or http://… server the runs were "
        "logged to) or run the command in the folder of the runs"
    ]
    assert list(tmp_path.iterdir()) == []


def test_require_existing_store_passes_an_existing_file_and_a_server(tmp_path):
    db = tmp_path / "runs.db"
    with pytest.raises(TrackingError, match=f"{db} does not exist"):
        require_existing_store(f"sqlite:///{db}")
    db.touch()
    require_existing_store(f"sqlite:///{db}")
    require_existing_store("http://127.0.0.1:1")  # a server is checked when opened, not here
