"""Next-edit prediction: the edit the user is likely to make next, from the edits just made.

`predict.py` picks the window and turns a rewrite into proposals; the rename, string and call-site
follow-ups answer without a model; `local.py` rewrites with the model in this process, `remote.py`
through a serving engine, both in the prompt format of `prompt.py`; `edit_history.py` keeps each
buffer's recent edits.
"""
