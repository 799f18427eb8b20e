"""The order and grouping in which pytest-xdist hands test files to its workers (tests/xdist_groups.py)."""
from xdist_groups import VLLM_GROUP, schedule_groups  # tests/ is on sys.path (rootdir-less test folder)


def test_vllm_files_form_one_group_handed_out_first_then_slow_files():
    modules = [("tests/a.py", set()), ("tests/b.py", {"slow"}), ("tests/c_vllm.py", {"vllm", "slow"}),
               ("tests/d.py", {"parametrize"}), ("tests/e.py", {"slow", "docker"}), ("tests/f_vllm.py", {"vllm"})]
    assert schedule_groups(modules) == [("tests/c_vllm.py", VLLM_GROUP), ("tests/f_vllm.py", VLLM_GROUP),
                                        ("tests/b.py", "tests/b.py"), ("tests/e.py", "tests/e.py"),
                                        ("tests/a.py", "tests/a.py"), ("tests/d.py", "tests/d.py")]


def test_no_modules_no_groups():
    assert schedule_groups([]) == []


def test_ray_files_form_one_group_in_place():
    modules = [("tests/a.py", set()), ("tests/ray1.py", {"ray"}), ("tests/ray2.py", {"ray", "slow"})]
    assert schedule_groups(modules) == [("tests/ray2.py", "ray"), ("tests/a.py", "tests/a.py"),
                                        ("tests/ray1.py", "ray")]
