"""The built site in a real headless Chromium."""
