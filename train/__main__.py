"""`python -m agentgym.train CONFIG.yaml [key=value ...]`."""
import sys

from agentgym.train.cli import main

sys.exit(main())
