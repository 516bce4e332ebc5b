"""`python -m memosight_lsp` runs the language server, like `memosight-lsp`."""

import sys

from memosight_lsp.cli import lsp_main

sys.exit(lsp_main())
