"""Examples that are Python, importable as ``examples.*`` from the repository root."""
