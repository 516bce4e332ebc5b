"""The model kept loaded between editor sessions (`keepAlive`): the editor's `memosight-lsp` is a
relay to a host process that serves the session and lingers after it, its model loaded, for the
next editor (relay.py, host.py; where they meet: rendezvous.py)."""
