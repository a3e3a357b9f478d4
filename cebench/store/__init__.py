"""The results CSV: its schema, writing, reading and merging."""
