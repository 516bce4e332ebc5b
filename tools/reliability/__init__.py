"""The reliability harness: protocol fuzzing and the typing soak against the real server over
stdio (docs/reliability.md). Run from the repository root: `python -m tools.reliability.fuzz`."""
