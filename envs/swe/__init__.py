"""SWE envs: fix real bugs in real repositories inside a Docker or bubblewrap sandbox.

agentgym/SWE-Mini-v0 runs tasks synthesised from the mini repositories shipped here (fast);
agentgym/SWE-Lib-v0 runs tasks synthesised from real libraries' sdists (inflection, toolz), downloaded
with pip and made once at first use. The -Docker / -Bwrap variants pin the back end (`auto` prefers
Docker). `SWEEnv(tasks="path/to/tasks.jsonl")` runs `agentgym swe make-tasks` output or SWE-bench
instances. See envs/swe/README.md.
"""
from agentgym.registration import SuiteEntry, register, register_suite

ENTRY = "agentgym.envs.swe.env:SWEEnv"


def register_envs() -> None:
    for source, name, turns in (("mini", "Mini", 20), ("lib", "Lib", 30)):
        register(f"agentgym/SWE-{name}-v0", ENTRY, max_turns=turns, kwargs={"tasks": source})
        for backend in ("docker", "bwrap"):
            register(f"agentgym/SWE-{name}-{backend.capitalize()}-v0", ENTRY, max_turns=turns,
                     kwargs={"tasks": source, "backend": backend})
    register_suite("swe", [SuiteEntry("agentgym/SWE-Mini-v0", label="swe-mini"),
                           SuiteEntry("agentgym/SWE-Lib-v0", label="swe-lib")], extend=True)
