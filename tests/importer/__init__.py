"""`bench import`: published pages and other tools' reports."""
