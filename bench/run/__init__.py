"""The matrix: its sweep, store, resume, run card and progress."""
