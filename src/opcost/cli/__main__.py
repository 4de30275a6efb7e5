"""``python -m opcost.cli``."""
import sys

from opcost.cli import main

sys.exit(main())
