"""One exception class per boundary, so callers can catch exactly what they mean."""


class AgentGymError(Exception):
    """Base class of every error agentgym raises on purpose."""


class RegistrationError(AgentGymError):
    """An env id is unknown, malformed or registered twice."""


class ToolError(AgentGymError):
    """A tool was defined wrongly (a bug in the env, not in the model's call)."""


class CheckError(AgentGymError):
    """`check_env` found an env that breaks the text-env contract."""


class ConfigError(AgentGymError):
    """A config file or CLI override is invalid; the message says how to fix it."""


class PolicyError(AgentGymError):
    """A policy backend failed or cannot do what was asked of it."""


class TokenMismatchError(AgentGymError):
    """Rollout token ids do not equal the tokenisation of the rendered conversation."""


class MissingDependencyError(AgentGymError, ImportError):
    """An optional dependency is not installed."""


def require(module: str, extra: str):
    """Import an optional module, or fail with the pip command that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{module!r} is needed here but not installed: pip install 'agentgym[{extra}]'"
        ) from exc


class RemoteEnvError(AgentGymError):
    """A served env (`agentgym serve env`, `remote:URL/ID`) could not be reached, timed out or refused a call."""
