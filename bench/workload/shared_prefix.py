"""Prompts that share a prefix with other requests: a prefix cell's workload.

Why groups: C streams that all sent one prefix would share it trivially
(one cached copy, one hit pattern); G groups (bench/core/plan.py
prefix_groups) make the cache hold several prefixes, as a server with a few
system prompts does. Each prompt is [system: its group's shared prefix,
user: a suffix unique to the request]. The shared part is cut on the
engine's cache block (floor(r × L ÷ block) × block tokens, plus half a
block of slack, so the last whole block is shared and the cut falls inside
the next one): a block-granular cache reuses whole blocks only. Every
prefix starts with a tag unique to the run, the cell and the group, every
suffix with one unique to the request, so nothing is shared across cells,
and nothing but the prefix within one (docs/methodology.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.workload.prompts import Prompt, PromptFactory

SUFFIX_MIN_TOKENS = 16  # a request's own part, even at 100% reuse
PRIME_TAIL_WORDS = 8  # the user message that primes a group's prefix


def shared_tokens(reuse: int, context: int, block: int) -> int:
    """Tokens of a prompt shared with its group: r% of the context, cut down
    to whole cache blocks (pure)."""
    block = max(1, block)
    return (reuse * context // 100) // block * block


def group_of(stream: int, request: int, groups: int) -> int:
    """The group of a stream's request-th request: (s + i) mod G, so every
    stream visits every group and no two streams keep to one (pure)."""
    return (stream + request) % groups


def cell_tag(phase_tag: str, context: int, concurrency: int, reuse: int) -> str:
    return f"{phase_tag}{context}-c{concurrency}-r{reuse}"


def two_messages(system: str | None, user: str) -> list[dict[str, str]]:
    """[system prefix, user suffix]; the user message alone without a prefix (pure)."""
    head = [{"role": "system", "content": system}] if system else []
    return [*head, {"role": "user", "content": user}]


@dataclass
class PrefixWorkload:
    """A prefix cell's texts: one shared prefix per group, and a suffix base
    that each request gets under its own tag (`request`)."""

    prefixes: list[str]  # per group; empty strings at 0% reuse
    suffix: Prompt
    suffix_tag: str
    shared: int  # the tokens meant to be shared (block-cut)
    run_tag: str

    def request(self, factory: PromptFactory, group: int, tag: str) -> Prompt:
        """A measured request of `group` with a suffix tagged `tag`."""
        user = factory.variant(self.suffix, self.suffix_tag, tag)
        system = self.prefixes[group] or None
        return Prompt(user.text, None, two_messages(system, user.text))

    def prime(self, factory: PromptFactory, group: int, tag: str) -> Prompt:
        """The request that puts `group`'s prefix in the cache: the prefix and a short tail."""
        tail = factory.short(tag, PRIME_TAIL_WORDS)
        return Prompt(tail.text, None, two_messages(self.prefixes[group] or None, tail.text))


def build_prefix_workload(factory: PromptFactory, context: int, concurrency: int, reuse: int,
                          groups: int, block: int, tag: str | None = None) -> PrefixWorkload:
    """The cell's texts, sized by the factory (blocking: /tokenize calls); `tag`: the
    cell's own (a rate cell's names its rate too), else a prefix cell's."""
    tag = tag or cell_tag("x", context, concurrency, reuse)
    shared = shared_tokens(reuse, context, block)
    prefixes = [""] * groups
    counted = 0
    if shared > 0:
        aim = shared + block // 2
        for g in range(groups):
            prompt = factory.build(aim, f"{tag}-g{g}")
            prefixes[g] = prompt.text
            counted = prompt.tokens or aim
    suffix_tag = f"{tag}-u"
    suffix = factory.build(max(SUFFIX_MIN_TOKENS, context - (counted or shared)), suffix_tag)
    return PrefixWorkload(prefixes, suffix, suffix_tag, shared, factory.run_tag)
