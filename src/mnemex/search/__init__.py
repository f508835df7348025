"""Query processing and the search pipeline."""
