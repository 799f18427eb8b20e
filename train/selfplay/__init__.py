"""Self-play and a league on multi-agent envs (the two-player TextArena games in seats mode).

The learner fills one or several seats of a match (agentgym/engine/multiagent.py), the other seats are drawn
from the league's opponent pool (`league.py`: random, the start weights, frozen snapshots that join every
`selfplay.snapshot_every` iterations, policy specs), each seat's turns train against the baseline of its own
seat role (per-seat group ids), and `evaluate.py` scores the learner against every pool member in both seat
orders (win / draw / loss with Wilson intervals). The collector is train/collectors/selfplay.py; the options
are the `selfplay:` section (`config.py`); docs/guide/self-play.md is the guide.
"""
