"""``python -m calorimeter``."""

import sys

from calorimeter.cli import main

sys.exit(main())
