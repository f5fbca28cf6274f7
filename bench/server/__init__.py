"""What the collector asks an engine, and how it reads the answers, counters and host facts."""
