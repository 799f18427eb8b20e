"""SWE envs: fix real bugs in real repositories inside a Docker or bubblewrap sandbox.

agentgym/SWE-Mini-v0 runs tasks synthesised from the mini repositories shipped here (fast);
agentgym/SWE-Lib-v0 runs tasks synthesised from real libraries' sdists (inflection, toolz), downloaded
with pip and made once at first use; `tasks="corpus"` adds five more libraries (two held out as the test split),
their test requirements installed at preparation time. `auto` prefers Docker; SWE-Mini-Bwrap-v0 (or `backend="bwrap"`)
needs no daemon. `SWEEnv(tasks="path/to/tasks.jsonl")` runs `agentgym swe make-tasks` output or SWE-bench
instances. See envs/swe/README.md.
"""
from agentgym.horizon import ContextDefaults, turn_limit
from agentgym.registration import SuiteEntry, register, register_suite

ENTRY = "agentgym.envs.swe.env:SWEEnv"
# a tool output may be 8,000 characters and the first observation 3,000: fold (the env summarises the workspace's
# diff and the last test run), with room for the system prompt, the fold message and one observation
CONTEXT = ContextDefaults(layout="fold", max_context_tokens=32768, max_observation_tokens=4096)
# budgets above the oracle's measured limit (agentgym/gold_paths.json): the oracle knows the fix, an agent reads first
READ = "room to read the repository and run its tests before the fix"


def register_envs() -> None:
    # Few ids on purpose (every id is checked by the whole-suite tests): pass backend="docker"/"bwrap" to pin one.
    register("agentgym/SWE-Mini-v0", ENTRY, max_turns=turn_limit("agentgym/SWE-Mini-v0", 20, READ),
             kwargs={"tasks": "mini"}, context=CONTEXT)
    register("agentgym/SWE-Mini-Bwrap-v0", ENTRY, max_turns=turn_limit("agentgym/SWE-Mini-Bwrap-v0", 20, READ),
             kwargs={"tasks": "mini", "backend": "bwrap"}, context=CONTEXT)
    register("agentgym/SWE-Lib-v0", ENTRY, max_turns=turn_limit("agentgym/SWE-Lib-v0", 30, READ),
             kwargs={"tasks": "lib"}, context=CONTEXT)
    register_suite("swe", [SuiteEntry("agentgym/SWE-Mini-v0", label="swe-mini"),
                           SuiteEntry("agentgym/SWE-Lib-v0", label="swe-lib")], extend=True)
