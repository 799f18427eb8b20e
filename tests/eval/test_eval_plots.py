"""`agentgym plot`: training curves from metrics.jsonl files shaped like the trainer's, to a PNG."""
import json
import math
import random


from agentgym.cli import main
from agentgym.eval.plots import read_metrics, series


def write_run(path, iterations, rate, nested=False, seed=0):
    """A realistic log: success climbs noisily, return follows, plus timing keys and a torn last line."""
    rng = random.Random(seed)
    path.mkdir(parents=True)
    lines = []
    for it in range(iterations):
        success = min(1.0, max(0.0, 1 - math.exp(-rate * it) + rng.uniform(-0.05, 0.05)))
        row = {"iteration": it, "success": success, "return": 2 * success - 0.3, "entropy": 1.2 - 0.01 * it,
               "kl": 0.001 * it, "time/generate_s": 3.1, "tokens_per_s": 410.0}
        if nested:
            row = {"iteration": it, "rollout": {"success": success, "return": 2 * success - 0.3}}
        lines.append(json.dumps(row))
    (path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"iteration": 99, "succ')
    return path


def test_plot_overlays_runs_to_a_png(tmp_path, capsys):
    a = write_run(tmp_path / "grpo", 20, 0.2)
    b = write_run(tmp_path / "gigpo", 25, 0.3, nested=True, seed=1)
    out = tmp_path / "curves.png"
    assert main(["plot", str(a), str(b), "--out", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert "wrote" in capsys.readouterr().out


def test_series_reads_flat_and_nested_keys_and_skips_torn_lines(tmp_path):
    rows = read_metrics(write_run(tmp_path / "r", 5, 0.5, nested=True))
    assert len(rows) == 5
    key, xs, ys = series(rows, ("success", "rollout/success"))
    assert key == "rollout/success" and xs == [1, 2, 3, 4, 5] and len(ys) == 5  # iterations counted from 1


def test_curves_number_iterations_as_the_trainer_console_does(tmp_path, capsys):
    """One numbering: the trainer's console says "iteration 1/3".."3/3"; the curves' x values are 1..3 too."""
    from agentgym.train.metrics import MetricsWriter

    writer = MetricsWriter(tmp_path, total=3, progress=True)  # stderr is captured, so a line per iteration
    for it in range(3):
        writer.write(it, {"success": it / 2, "return": float(it)})
    writer.close()
    console = [int(line.split()[1].split("/")[0]) for line in capsys.readouterr().err.splitlines()
               if line.startswith("iteration ")]
    _, xs, ys = series(read_metrics(tmp_path), ("success",))
    assert console == [1, 2, 3] and xs == console and ys == [0.0, 0.5, 1.0]
    rows = [{"success": 0.1}, {"success": 0.2}]  # no iteration key at all: rows count from 1 as well
    assert series(rows, ("success",))[1] == [1, 2]


def test_plot_errors_are_one_line(tmp_path, capsys):
    run = write_run(tmp_path / "r", 3, 0.5)
    assert main(["plot", str(tmp_path / "missing"), "--out", str(tmp_path / "x.png")]) == 2
    assert main(["plot", str(run), "--out", str(tmp_path / "x.pdf")]) == 2
    assert main(["plot", str(run), "--metric", "nonexistent", "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("agentgym plot: error:") for line in err)
    assert not (tmp_path / "x.png").exists()
