"""The collector: measures an OpenAI-compatible inference server over a
matrix of context lengths × concurrent requests and writes a run directory.

Its wings, each importing only from the ones listed before it (docs/contributing.md
has the map; tests/project/test_layers.py holds the order):

- ``core``: the vocabulary every wing shares (plans, errors, the event loop, auth, limits).
- ``server``: what we ask an engine and how we read its answers and counters.
- ``workload``: what we send (prompts today; prefix pools, conversations, arrivals next).
- ``measure``: one stream, one window, one cell, measured and judged.
- ``distributed``: the same cell measured by several processes or hosts.
- ``run``: the matrix, its store, resume and progress.
- ``cli.py`` / ``params.py``: the command line over all of it.
"""

__version__ = "0.1.0"
