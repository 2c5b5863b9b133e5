"""`python -m ernie_deploy.cli`: the same as the `ernie-deploy` command."""

import sys

from ernie_deploy.cli import main

sys.exit(main())
