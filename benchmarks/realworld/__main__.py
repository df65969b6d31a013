"""``python benchmarks/realworld [build|run] ...``: see realworld.cli."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from realworld.cli import main  # noqa: E402

sys.exit(main())
