"""Helpers the tests share (no tests here)."""
