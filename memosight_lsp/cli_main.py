"""`python -m memosight_lsp.cli_main ...` is `memosight ...` (for environments without scripts)."""

import os
import sys

# As in __main__.py: the current folder (a workspace, maybe) must not shadow real packages.
if sys.path and sys.path[0] in ("", os.getcwd()) and not getattr(sys.flags, "safe_path", False):
    del sys.path[0]

from memosight_lsp.cli import main

sys.exit(main())
