"""One stream, one window, one cell: the measurement core and its judgements."""
