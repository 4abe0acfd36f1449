"""Rows: the schema, the one place outcomes become rows, writing, reading back, merging, known-good sets."""
