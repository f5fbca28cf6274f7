"""Engine profiles, and the collector against real engines."""
