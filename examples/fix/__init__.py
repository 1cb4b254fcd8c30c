"""A FIX 4.4 decoder and its pipeline: see README.md in this folder."""
