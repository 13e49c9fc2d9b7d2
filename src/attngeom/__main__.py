"""``python -m attngeom``: the ``attngeom`` command, where its script is not installed (a checkout on
``PYTHONPATH``, say)."""

import sys

from .cli import main

sys.exit(main())
