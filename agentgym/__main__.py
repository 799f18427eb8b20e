import sys

from agentgym.cli import main

sys.exit(main())
