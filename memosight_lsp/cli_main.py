"""`python -m memosight_lsp.cli_main ...` is `memosight ...` (for environments without scripts)."""

import sys

from memosight_lsp.cli import main

sys.exit(main())
