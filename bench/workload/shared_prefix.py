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

With a prompt source (bench/workload/sources.py) each group's prefix is the
source's text from the prompt its tag picks, and the suffixes are
SOURCE_SUFFIXES texts of the source each sized the same way: request n takes
suffix n mod SOURCE_SUFFIXES under its own tag, so requests differ past their
tag too. Filler keeps its one suffix, retagged per request.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.workload.prompts import Prompt, PromptFactory

SUFFIX_MIN_TOKENS = 16  # a request's own part, even at 100% reuse
PRIME_TAIL_WORDS = 8  # the user message that primes a group's prefix
SOURCE_SUFFIXES = 8  # a source's distinct suffix texts per cell


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
    """A prefix cell's texts: one shared prefix per group, and suffix bases that
    requests get under their own tags (`request`)."""

    prefixes: list[str]  # per group; empty strings at 0% reuse
    suffixes: list[Prompt]  # one for filler, SOURCE_SUFFIXES for a prompt source
    suffix_tags: list[str]
    shared: int  # the tokens meant to be shared (block-cut)
    run_tag: str
    prefix_indexes: list[int | None] | None = None  # per group, the source prompt it starts at

    @property
    def variants(self) -> int:
        return len(self.suffixes)

    def request(self, factory: PromptFactory, group: int, tag: str, n: int = 0) -> Prompt:
        """A measured request of `group` with suffix n mod variants, tagged `tag`."""
        k = n % len(self.suffixes)
        user = factory.variant(self.suffixes[k], self.suffix_tags[k], tag)
        system = self.prefixes[group] or None
        return Prompt(user.text, None, two_messages(system, user.text), index=user.index)

    def prime(self, factory: PromptFactory, group: int, tag: str) -> Prompt:
        """The request that puts `group`'s prefix in the cache: the prefix and a short tail
        (a source's words after the tag, with a source)."""
        if factory.source is None:
            tail, index = factory.short(tag, PRIME_TAIL_WORDS).text, None
        else:
            tail = f"[{self.run_tag} {tag}] " + factory.source.text(PRIME_TAIL_WORDS, tag)[0]
            index = self.prefix_indexes[group] if self.prefix_indexes else None
        return Prompt(tail, None, two_messages(self.prefixes[group] or None, tail), index=index)

def build_prefix_workload(factory: PromptFactory, context: int, concurrency: int, reuse: int,
                          groups: int, block: int, tag: str | None = None) -> PrefixWorkload:
    """The cell's texts, sized by the factory (blocking: /tokenize calls); `tag`: the
    cell's own (a rate cell's names its rate too), else a prefix cell's."""
    tag = tag or cell_tag("x", context, concurrency, reuse)
    shared = shared_tokens(reuse, context, block)
    prefixes: list[str] = [""] * groups
    indexes: list[int | None] = [None] * groups
    counted = 0
    if shared > 0:
        aim = shared + block // 2
        for g in range(groups):
            prompt = factory.build(aim, f"{tag}-g{g}")
            prefixes[g], indexes[g] = prompt.text, prompt.index
            counted = prompt.tokens or aim
    target = max(SUFFIX_MIN_TOKENS, context - (counted or shared))
    tags = [f"{tag}-u"] + [f"{tag}-u{k}" for k in range(1, SOURCE_SUFFIXES if factory.source else 1)]
    suffixes = [factory.build(target, t) for t in tags]
    return PrefixWorkload(prefixes, suffixes, tags, shared, factory.run_tag, indexes)
