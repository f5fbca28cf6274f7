"""The collector: measures an OpenAI-compatible inference server over a
matrix of context lengths × concurrent requests and writes a run directory."""

__version__ = "0.1.0"
