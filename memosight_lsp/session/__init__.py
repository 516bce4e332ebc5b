"""The asynchronous half of a completion: everything that knows about time and documents.

Per buffer, on the server's event loop: the completion flow (the refusal decided once, the
first-response deadline and the early answer, type-through, precompute, the push of a longer
answer), the next-edit flow, the model worker's scheduler (one job at a time, newest first,
abandoned past its bound), the model host (loading on the worker, the state the editors see) and
the counters. The synchronous work each job runs is the pipeline's (memosight_lsp/pipeline/).
"""
