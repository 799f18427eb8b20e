"""Built-in env families. Each family's `register_envs()` registers its ids with string entry points,
so importing this package stays cheap: an env's heavy modules load only when it is made."""
import importlib
import importlib.util

FAMILIES = ("toy", "household", "textworld", "search", "swe", "web", "scienceworld", "textarena", "mcp", "remote")

for _family in FAMILIES:
    if importlib.util.find_spec(f"agentgym.envs.{_family}") is not None:
        _register = getattr(importlib.import_module(f"agentgym.envs.{_family}"), "register_envs", None)
        if _register is not None:  # a family folder without it is not an env family (yet)
            _register()
