"""The shared vocabulary of the collector: plans, errors, the event loop, auth, limits.

Imports nothing from the other wings."""
