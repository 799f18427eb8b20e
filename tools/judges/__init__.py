"""LLM judges as rewards: `LLMJudge` (a rubric item scored by any OpenAI-compatible server), `GroupJudge` and
`judge_groups` (RULER-style relative judging of a task's G rollouts), over a cached, bounded, retrying client."""
from agentgym.tools.judges.client import (ClientSettings, JudgeClient, JudgeError, OpenAIChatBackend, ScriptedBackend,
                                          parse_backend)
from agentgym.tools.judges.groups import episode_from_trajectory, judge_groups
from agentgym.tools.judges.judge import (BINARY_PROMPT, DEFAULT_PROMPT, GROUP_PROMPT, GroupJudge, LLMJudge,
                                         parse_group_verdict, parse_verdict)

__all__ = ["BINARY_PROMPT", "ClientSettings", "DEFAULT_PROMPT", "GROUP_PROMPT", "GroupJudge", "JudgeClient",
           "JudgeError", "LLMJudge", "OpenAIChatBackend", "ScriptedBackend", "episode_from_trajectory",
           "judge_groups", "parse_backend", "parse_group_verdict", "parse_verdict"]
