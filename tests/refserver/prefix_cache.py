"""The reference server's block-granular prefix cache (`Scenario.prefix_cache_block`).

Pure: no clock, no I/O, so the reuse a test expects is computed exactly here
and compared with what the server published. It keeps whole blocks of prompt
tokens, each keyed by a digest chained over every token before its end (a block
is only ever reused after the same whole prefix, as in vLLM's hashed blocks).

- `lookup(tokens, limit)`: the cached tokens of a prompt, the longest run of
  stored leading blocks, at most `limit` tokens (the server passes prompt − 1:
  the last token is always computed). The blocks it matched become the most
  recently used.
- `store(tokens)`: after prefill, every whole block of the prompt is stored
  (or refreshed). Within a prompt the first block becomes the most recent and
  the last the least, so under pressure a prefix's tail goes before its head
  and a stored block's parent is never evicted before it.
- Capacity (`capacity_tokens`, None: unlimited) is counted in whole blocks;
  storing past it evicts least-recently-used blocks first. A prompt longer than
  the whole cache keeps only its leading blocks that fit.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Whole blocks of prompt tokens with least-recently-used eviction."""

    def __init__(self, block: int, capacity_tokens: int | None = None) -> None:
        if block < 1:
            raise ValueError(f"prefix cache: block must be >= 1, got {block}")
        self.block = block
        self.capacity_blocks = None if capacity_tokens is None else capacity_tokens // block
        self._lru: OrderedDict[bytes, None] = OrderedDict()  # least recently used first
        self.evicted = 0  # blocks evicted so far

    def _keys(self, tokens: Sequence[str], n_blocks: int) -> list[bytes]:
        """Chained digests of the first `n_blocks` whole blocks of `tokens`."""
        keys, key, b = [], b"", self.block
        for i in range(n_blocks):
            h = hashlib.blake2b(key, digest_size=16)
            h.update("\x00".join(tokens[i * b:(i + 1) * b]).encode())
            key = h.digest()
            keys.append(key)
        return keys

    def _touch(self, keys: list[bytes]) -> None:
        for k in reversed(keys):  # the first block ends up the most recent
            self._lru[k] = None
            self._lru.move_to_end(k)

    def lookup(self, tokens: Sequence[str], limit: int) -> int:
        """Cached tokens of a prompt: its leading stored whole blocks, at most `limit` tokens."""
        n_max = max(0, min(len(tokens), limit)) // self.block
        keys = self._keys(tokens, n_max)
        n = 0
        while n < len(keys) and keys[n] in self._lru:
            n += 1
        self._touch(keys[:n])
        return n * self.block

    def store(self, tokens: Sequence[str]) -> int:
        """Store the prompt's whole blocks (those that fit); returns the tokens stored."""
        n = len(tokens) // self.block
        if self.capacity_blocks is not None:
            n = min(n, self.capacity_blocks)
        keys = self._keys(tokens, n)
        self._touch(keys)
        while self.capacity_blocks is not None and len(self._lru) > self.capacity_blocks:
            self._lru.popitem(last=False)
            self.evicted += 1
        return n * self.block

    def clear(self) -> None:
        """Forget every block (a flush: SGLang /flush_cache, vLLM /reset_prefix_cache)."""
        self._lru.clear()

    @property
    def tokens(self) -> int:
        """Tokens held now (whole blocks)."""
        return len(self._lru) * self.block


class ServerCache:
    """The scenario's prefix cache as the server runs it: what a request reuses
    (true), what it stores, and what the engine's counters claim.

    With `prefix_cache_block` it is the block cache above; without, the old
    all-or-nothing cache: a prompt is a hit (every token cached) when its first
    `prefix_cache_words` words were prefilled before, or when it is forced."""

    def __init__(self, sc) -> None:
        self.sc = sc
        self.blocks = (PrefixCache(sc.prefix_cache_block, sc.prefix_cache_capacity_tokens)
                       if sc.prefix_cache_block else None)
        self.seen: set[tuple[str, ...]] = set()  # the old cache: prefixes prefilled before
        self.hits = 0  # tokens truly reused, all requests

    def lookup(self, words: Sequence[str], prompt_tokens: int, forced: bool = False,
               missed: bool = False) -> int:
        """Tokens of this prompt the cache truly reuses (counted in `hits`);
        `missed`: none (the scenario's miss marker is in its last message)."""
        if self.sc.prefix_cache_silent_off or missed or prompt_tokens <= 0:
            return 0
        if self.blocks is not None:
            cached = self.blocks.lookup(words, prompt_tokens - 1)
        else:
            hit = forced or tuple(words[:self.sc.prefix_cache_words]) in self.seen
            cached = prompt_tokens if hit else 0
        self.hits += cached
        return cached

    def store(self, words: Sequence[str]) -> None:
        """After prefill: keep what a later prompt may reuse."""
        if self.sc.prefix_cache_silent_off:
            return
        if self.blocks is not None:
            self.blocks.store(words)
        else:
            self.seen.add(tuple(words[:self.sc.prefix_cache_words]))

    def flush(self) -> None:
        self.seen.clear()
        if self.blocks is not None:
            self.blocks.clear()

    def claimed(self, cached: int) -> int:
        """What the engine's counters (or llama.cpp's timings) say of `cached` tokens."""
        return int(round(cached * self.sc.prefix_counters_lie))

    @property
    def block(self) -> int:
        """The block the engine reports (vLLM block_size, SGLang page_size)."""
        return self.sc.prefix_cache_block or 16
