"""agentgym list | info | check | play, in process where possible and through a real subprocess for play."""
import os
import subprocess
import sys

import pytest

import agentgym
from agentgym.cli import main


def run_cli(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "agentgym", *args], input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_list(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("agentgym/Toy-KeyDoor-v0") and "max_turns=10" in line for line in lines)
    assert len(lines) == len(agentgym.list_envs())
    assert main(["list", "agentgym/Toy-Calc"]) == 0
    assert capsys.readouterr().out.split() == ["agentgym/Toy-Calculator-v0", "max_turns=4"]
    assert main(["list", "--suite", "toy"]) == 0
    assert "agentgym/Toy-KeyDoor-Long-v0" in capsys.readouterr().out
    assert main(["list", "--suites"]) == 0
    assert "toy" in capsys.readouterr().out


def test_info_shows_spec_instructions_and_tools(capsys):
    assert main(["info", "agentgym/Toy-Calculator-v0"]) == 0
    out = capsys.readouterr().out
    for fragment in ("entry point:  agentgym.envs.toy.calculator:CalculatorEnv", "max_turns:    4", "kwargs:       {}",
                     "suites:       toy", "Answer the arithmetic question", "tools (2):", '"name": "calculate"',
                     '"required": ['):
        assert fragment in out, fragment
    assert main(["info", "agentgym/Toy-KeyDoor-Long-v0"]) == 0
    out = capsys.readouterr().out
    assert 'kwargs:       {"length": 6}' in out and "tools (0): none" in out


def test_misspelt_id_is_a_one_line_error(capsys):
    assert main(["info", "agentgym/Toy-KeyDor-v0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Did you mean 'agentgym/Toy-KeyDoor-v0'" in err
    assert err.startswith("agentgym info: error:")


def test_check(capsys):
    assert main(["check", "agentgym/Toy-KeyDoor-v0", "agentgym/Toy-Calculator-v0", "--seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert "ok      agentgym/Toy-KeyDoor-v0" in out and "2 ok, 0 failed, 0 skipped" in out
    assert "checks:" not in out
    assert main(["check", "agentgym/Toy-KeyDoor-v0", "-v"]) == 0
    assert "checks: api, gymnasium, observation, info, anchor, reward, determinism" in capsys.readouterr().out


@pytest.mark.parametrize("args, fragment", [
    ([], "or pass --all"),
    (["agentgym/Toy-KeyDoor-v0", "--seeds", "a,b"], "--seeds must be comma-separated integers"),
    (["agentgym/Toy-KeyDoor-v0", "--max-steps", "0"], "--max-steps must be >= 1"),
    (["agentgym/Nope-v0"], "no env registered as 'agentgym/Nope-v0'"),
])
def test_check_bad_arguments(capsys, args, fragment):
    assert main(["check", *args]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


def test_check_reports_failures_and_skips(capsys, scratch_ids):
    from agentgym.envs.toy.keydoor import KeyDoorEnv
    from agentgym.errors import require

    class GarbageIsValid(KeyDoorEnv):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward, terminated, truncated, {**info, "valid_action": True}

    def needs_missing_module():
        require("agentgym_no_such_module_xyz", "xyz")

    for name, cls in (("test/CliBroken-v0", GarbageIsValid), ("test/CliMissing-v0", needs_missing_module)):
        scratch_ids.append(name)
        agentgym.register(name, cls, max_turns=4)
    assert main(["check", "test/CliBroken-v0", "test/CliMissing-v0", "agentgym/Toy-KeyDoor-v0"]) == 1
    out = capsys.readouterr().out
    assert "FAILED  test/CliBroken-v0  [any string]" in out and "skipped test/CliMissing-v0" in out
    assert "1 ok, 1 failed, 1 skipped" in out


def test_check_all_covers_every_registered_env(monkeypatch, capsys):
    from agentgym import checker

    checked = []
    monkeypatch.setattr(checker, "check_env", lambda env_id, **kw: checked.append(env_id) or
                        checker.CheckReport(env_id, ("api",)))
    assert main(["check", "--all"]) == 0
    assert checked == agentgym.list_envs()
    assert f"{len(checked)} ok, 0 failed, 0 skipped" in capsys.readouterr().out


def test_play_through_a_pipe():
    script = ":help\n:oracle\nleft\ndance\n:reset 3\n:bogus\n:tools\n:reset x\n::quit\n"
    out = run_cli("play", "agentgym/Toy-KeyDoor-v0", "--seed", "1", stdin=script)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for fragment in ("Find the key, take it, then open the door", "=== episode (seed 1)", "You are in room 3",
                     "[admissible: left]", ":reset [SEED]", "oracle: left", "valid=True", "valid=False",
                     "Unknown command 'dance'", "=== episode (seed 3)", "unknown command ':bogus'",
                     "this env has no tools", "usage: :reset [SEED]", "Unknown command ':quit'", "bye"):
        assert fragment in text, fragment


def test_play_an_episode_to_the_end_and_quit():
    env, actions = agentgym.make("agentgym/Toy-KeyDoor-v0"), []
    env.reset(seed=0)
    while not env.unwrapped.done:
        actions.append(env.oracle_action())
        env.step(actions[-1])
    actions += ["left", ":quit", "never read"]
    out = run_cli("play", "agentgym/Toy-KeyDoor-v0", "--seed", "0", stdin="\n".join(actions) + "\n")
    assert out.returncode == 0, out.stderr
    assert "reward=1  success=True" in out.stdout and "episode terminated: solved in 5 turn(s)" in out.stdout
    assert "The episode is over" in out.stdout and "never read" not in out.stdout


def test_play_oracle_bang_plays_the_oracle_and_a_win_shows_the_end_not_admissible_actions():
    script = ":oracle\n" + ":oracle!\n" * 5 + ":oracle!\nleft\n:reset\n"
    out = run_cli("play", "agentgym/Toy-KeyDoor-v0", "--seed", "0", stdin=script)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "oracle: right\n(type it to play it, or :oracle! to let the oracle play it)" in text
    played = [line.split(") ", 1)[1] for line in text.splitlines() if line.startswith("(oracle plays) ")]
    assert played == ["right", "take key", "right", "right", "open door"]  # the oracle's plan, played
    assert text.count("valid=True  turn=") == 5 and "turn=6" not in text
    end = text[text.index("You win!"):text.index("=== episode (seed 0)", text.index("You win!"))]
    assert "[admissible:" not in end  # the env still lists actions after the win; play does not show them
    assert "episode terminated: solved in 5 turn(s), return=1 success=True" in end
    # after the end, an action, :oracle! and :oracle each say how to go on instead of acting
    assert end.count("Type :reset to play seed 0 again, :reset SEED for another task, or :quit.") == 3
    assert "You are in room 0" in text[text.index("=== episode (seed 0)", text.index("You win!")):]


def test_play_oracle_on_an_env_without_one():
    import io

    from agentgym.cli_envs import play
    from agentgym.core import TextEnv, make_info

    class NoOracle(TextEnv):
        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return "say something", make_info()

        def step(self, action):
            return f"you said {action}", 0.0, False, False, make_info()

    out = io.StringIO()
    assert play(NoOracle(), stdin=io.StringIO(":oracle!\n:oracle\nhi\n"), out=out) == 0
    text = out.getvalue()
    assert text.count("this env has no oracle action here") == 2
    assert "you said hi" in text and "turn=1" in text and "turn=2" not in text  # only "hi" was a turn


def test_play_truncates_at_the_turn_limit_and_tool_envs():
    out = run_cli("play", "agentgym/Toy-Calculator-v0", "--max-turns", "1", stdin=':tools\nhello\n')
    assert out.returncode == 0, out.stderr
    assert '"name": "calculate"' in out.stdout and "No tool call found" in out.stdout
    assert "episode truncated (turn limit)" in out.stdout


def test_play_bad_arguments():
    out = run_cli("play", "agentgym/Toy-KeyDoor-v0", "--max-turns", "0")
    assert out.returncode == 2 and "--max-turns must be >= 1" in out.stderr and "Traceback" not in out.stderr
    out = run_cli("play", "agentgym/Toy-Keydoor-v0")
    assert out.returncode == 2 and "Did you mean 'agentgym/Toy-KeyDoor-v0'" in out.stderr


def test_info_on_an_env_whose_dependency_is_missing(capsys, scratch_ids):
    scratch_ids.append("test/InfoNoModule-v0")
    agentgym.register("test/InfoNoModule-v0", "no_such_plugin_xyz.env:Env", max_turns=3)
    assert main(["info", "test/InfoNoModule-v0"]) == 0
    out = capsys.readouterr().out
    assert "entry point:  no_such_plugin_xyz.env:Env" in out and "cannot make it here" in out


def test_version_is_the_packages(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentgym {agentgym.__version__}"


def test_a_closed_pipe_ends_quietly():
    # `agentgym list | head -1`: the reader leaves after one line. A 4 KiB pipe (the listing is ~30 KiB) makes the
    # command still be writing when it does, every time; it ends without a BrokenPipeError traceback.
    fcntl = pytest.importorskip("fcntl")
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    proc = subprocess.Popen([sys.executable, "-m", "agentgym", "list"], stdout=write_end, stderr=subprocess.PIPE,
                            text=True)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        first = reader.readline()
    _, err = proc.communicate(timeout=120)
    assert first.startswith("agentgym/")
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == 141
