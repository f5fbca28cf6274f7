"""Detecting a model that repeats itself, from the tail of its streamed
text (pure). The contract calls such a cell "looped".

A model that falls into repetition emits the same piece of text again and
again; its speed then says nothing about real use, so such a cell is
discarded (status Looped) while its text is kept as evidence.

Rule: the text's tail is periodic when, for some period p of 1 to
MAX_PERIOD characters, the last L characters satisfy s[i] == s[i - p] with
L >= max(MIN_REPEATS * p, MIN_REPEAT_CHARS). Natural text never repeats
itself exactly over 256+ characters; a repeating model does indefinitely.
"""

from __future__ import annotations

import numpy as np

MAX_PERIOD = 256
MIN_REPEATS = 4
MIN_REPEAT_CHARS = 256


def detect_repetition(text: str) -> int | None:
    """The period of a repeating tail, or None when the tail is not periodic."""
    data = np.frombuffer(text.encode("utf-8", "replace"), dtype=np.uint8)
    n = len(data)
    for p in range(1, min(MAX_PERIOD, n // MIN_REPEATS) + 1):
        need = max(MIN_REPEATS * p, MIN_REPEAT_CHARS)
        if need > n:
            break
        tail = data[n - need :]
        prev = data[n - need - p : n - p] if n - need - p >= 0 else None
        if prev is None:
            # the first p characters have no predecessor: compare the rest
            if np.array_equal(tail[p:], tail[:-p]):
                return p
            continue
        if np.array_equal(tail, prev):
            return p
    return None

