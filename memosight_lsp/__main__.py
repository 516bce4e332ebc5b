"""`python -m memosight_lsp` runs the language server, like `memosight-lsp`."""

import os
import sys

# `python -m` puts the current folder first on sys.path. Editors start servers inside the
# workspace: its torch.py or transformers.py must not be imported in place of the real ones
# (workspace files are parsed, never imported). This package itself is already found.
if sys.path and sys.path[0] in ("", os.getcwd()) and not getattr(sys.flags, "safe_path", False):
    del sys.path[0]

from memosight_lsp.cli import lsp_main

sys.exit(lsp_main())
