"""One module per `memosight` subcommand: each has `register(subparsers)` and `run(args)`."""
