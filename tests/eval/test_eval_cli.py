"""`agentgym eval` / `agentgym compare` from the command line: outputs, resume, one-line errors."""
import json

import pytest

from agentgym.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_eval_command_writes_reports_and_resumes(tmp_path, capsys):
    out = tmp_path / "oracle"
    argv = ["eval", "--policy", "oracle", "--env", "agentgym/Toy-KeyDoor-v0", "agentgym/Toy-Calculator-v0",
            "--episodes", "3", "--samples", "2", "--seed", "5", "--out", str(out), "--workers", "2"]
    code, stdout, _ = run_cli(capsys, *argv)
    assert code == 0
    assert "| agentgym/Toy-KeyDoor-v0 | 6 | 100.0%" in stdout and f"html report: {out / 'report.html'}" in stdout
    results = json.loads((out / "results.json").read_text())
    assert len(results["trajectories"]) == 12 and results["run"]["seed"] == 5
    code, stdout, _ = run_cli(capsys, *argv)  # everything is there already
    assert code == 0 and "resumed 12 finished episode(s)" in stdout and "ran 0 now" in stdout

    other = tmp_path / "random"
    assert run_cli(capsys, *[a if a != "oracle" else "random" for a in argv[:-4]], "--out", str(other))[0] == 0
    code, stdout, _ = run_cli(capsys, "compare", str(out), str(other), "--out", str(tmp_path / "cmp"),
                              "--name", "oracle", "--name", "random")
    assert code == 0 and "| env | oracle | random | change |" in stdout
    assert (tmp_path / "cmp" / "compare.html").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--env", "agentgym/Toy-KeyDor-v0"], "Did you mean"),
    (["--suite", "toys"], "no suite named"),
    (["--suite", "toy", "--env", "agentgym/Toy-KeyDoor-v0"], "exactly one"),
    ([], "exactly one"),
    (["--suite", "toy", "--episodes", "0"], "--episodes must be >= 1"),
    (["--suite", "toy", "--samples", "-1"], "--samples must be >= 1"),
    (["--suite", "toy", "--workers", "0"], "--workers must be >= 1"),
    (["--suite", "toy", "--max-turns", "0"], "--max-turns must be >= 1"),
    (["--suite-file", "/nonexistent/suite.yaml"], "does not exist"),
])
def test_bad_eval_arguments_give_one_line_errors(tmp_path, capsys, extra, needle):
    code, _, err = run_cli(capsys, "eval", "--policy", "oracle", "--out", str(tmp_path / "o"), *extra)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("agentgym eval: error:") and needle in err


def test_compare_without_results_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run_cli(capsys, "compare", str(tmp_path), "--out", str(tmp_path / "c"))
    assert code == 2 and "run `agentgym eval" in err and len(err.strip().splitlines()) == 1
