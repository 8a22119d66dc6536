"""Reports: text tables, JSON and CSV of results (HTML and traces come with the suite)."""
