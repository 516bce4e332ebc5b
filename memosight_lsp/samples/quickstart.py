"""A small file to try completion on: `make demo` completes the empty loop body below."""

import os


def list_python_files(root):
    """All .py files under root, sorted."""
    result = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            if name.endswith(".py"):
                result.append(os.path.join(dirpath, name))
    return sorted(result)


def count_lines(paths):
    total = 0
    for path in paths:
        
    return total
