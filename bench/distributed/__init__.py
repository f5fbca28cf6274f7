"""The same cell measured by several processes (shards) or hosts (coordinator)."""
