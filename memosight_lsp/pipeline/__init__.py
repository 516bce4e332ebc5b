"""The synchronous half of a completion: request -> context -> prompt -> decode -> post-process.

`request.py` holds the request, the result and `CompletionBackend`, the protocol both backends
implement: `LocalBackend` (local_backend.py: the model in this process, memosight_lsp/inference/)
and `EngineBackend` (engine_backend.py: a serving engine, memosight_lsp/engines/). Nothing here
waits on documents or the clock beyond the deadline a request carries (memosight_lsp/session/).
"""
