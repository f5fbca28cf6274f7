"""The run-directory contract (rundir/): schema, metrics, words, statuses."""
