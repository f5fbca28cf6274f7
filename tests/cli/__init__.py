"""Both command lines' bad input: one line, no traceback."""
