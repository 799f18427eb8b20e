"""`python -m agentgym.train CONFIG.yaml [key=value ...]`."""
import sys

from agentgym.train.cli import main

if __name__ == "__main__":  # a vLLM engine's processes may import this module again: start nothing then
    sys.exit(main())
