"""The warehouse: one directory (or URI) of Delta tables."""
