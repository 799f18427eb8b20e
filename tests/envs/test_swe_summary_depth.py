"""The SWE repository summary shows the deepest folder tree that fits its budget whole, and a depth whose last
folder was cut is not whole (issue 51, defect 7: it was marked complete, so a truncated deeper tree was shown
when a shallower one fitted whole)."""
import random

from agentgym.envs.swe.summary import summarize_files

NAMES = ("pkg", "src", "core", "util", "tests", "docs", "io", "api")


def _repository(rng: random.Random) -> list[str]:
    paths = set()
    for _ in range(rng.randint(5, 80)):
        folder = "/".join(rng.choice(NAMES) + str(rng.randint(0, 3)) for _ in range(rng.randint(0, 4)))
        name = rng.choice(("mod", "a", "b", "conf", "readme")) + str(rng.randint(0, 20)) + \
            rng.choice((".py", ".py", ".txt", ".cfg", ".md"))
        paths.add(f"{folder}/{name}" if folder else name)
    return sorted(paths)


def _depth(text: str) -> int:
    return int(text.splitlines()[0].split("shown to depth ")[1].split(";")[0])


def test_a_summary_that_leaves_folders_out_is_the_depth_1_fallback():
    """Depths are tried deepest first and the first whole one is kept; only depth 1 may come back cut."""
    cut_deeper = []
    for seed in range(400):
        rng = random.Random(seed)
        paths, budget = _repository(rng), rng.choice((300, 500, 800, 1200))
        text = summarize_files(paths, budget=budget)
        assert len(text) <= budget
        if "more folders not shown" in text and _depth(text) > 1:
            cut_deeper.append((seed, budget, _depth(text)))
    assert not cut_deeper, f"cut summaries at depth > 1 (seed, budget, depth): {cut_deeper}"


def test_a_cut_last_folder_falls_back_to_the_shallower_whole_tree():
    # at depth 2 the last of seven folders, zz/deep (40 long names), does not fit 400 characters even shortened;
    # at depth 1 all three folders do
    paths = ["setup.py", *(f"pkg/a{i}/mod{i}.py" for i in range(5)),
             *(f"zz/deep/{'long_module_name_' * 6}{i}.py" for i in range(40))]
    text = summarize_files(paths, budget=400, max_depth=2)
    assert text == summarize_files(paths, budget=10_000, max_depth=1)
    assert _depth(text) == 1 and "not shown" not in text and "zz/ [1 subfolders: 40 .py" in text
