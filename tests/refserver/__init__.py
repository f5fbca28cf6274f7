"""A test-only reference server: OpenAI-compatible streaming driven by a
`Scenario`, with an exact log of when every chunk was sent (ground truth for
the collector's metrics) and faults on demand. See harness.py to start one."""

from tests.refserver.scenario import Scenario

__all__ = ["Scenario"]
