"""Indexes over the memories table (FTS5 now; vectors later)."""
