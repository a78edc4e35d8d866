"""``python -m agentcore``: the ``agentcore`` command, for an environment whose scripts
folder is not on ``PATH`` (see ``agentcore.cli``)."""

import sys

from agentcore.cli import main

if __name__ == "__main__":
    sys.exit(main())
