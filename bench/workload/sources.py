"""Where a prompt's text comes from (`bench run --prompt-source`, `--prompts FILE`).

`filler` (the default) is PromptFactory's word list, unchanged. Every other source is a
list of prompts — a user's file (bench/workload/prompt_files.py), or one of two the
project generates itself from a seed, nothing downloaded or fetched:
- `natural`: ordinary English prose from a small hand-written grammar, varied but
  predictable, the text a draft model guesses well;
- `adversarial`: strings of random letters, digits and signs a model is asked to
  continue, the text a draft model guesses badly.

A prompt of a matrix cell is its unique tag, then the source's text from one prompt
onwards (prompt i, then i+1, ... wrapping round: padded with more of the source, never
filler), cut at a word boundary to the word count PromptFactory steers to the exact
token count. Which prompt a tag starts at is a hash of the run's prompt seed and the
tag (not the session's request prefix), so a run's prompts can be made again.

A conversation (--turns) with a source: each user message and each fixed reply is a
cut of the source at its turn's word count. With a file of chat items its turns are
the file's own, in order: conversation v starts at the item its tag hashes to, turn j
sends the j-th user turn from there and its reply replays the assistant turn that
answered it (an item with fewer turns than the conversation needs continues with the
next item's turns); a turn shorter than its share of the context is padded with the
next user turns (a reply: the next assistant turns), one longer is cut at a word.
Natural and adversarial conversations take each message from its own prompt.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

FILLER, NATURAL, ADVERSARIAL = "filler", "natural", "adversarial"
BUILT_IN = (FILLER, NATURAL, ADVERSARIAL)
GENERATED_PROMPTS = 1000  # prompts a built-in source has (made on demand)
_WORD = re.compile(r"\S+\s*")

# -- natural -------------------------------------------------------------------------------
# Written for this project: plain sentences about everyday work, weather and travel.
_NAMES = ("Anna", "the new teacher", "my neighbour", "the old farmer", "our manager", "a young doctor",
          "the baker", "his sister", "the driver", "a quiet student", "the mayor", "my grandfather")
_PLACES = ("the market", "the station", "the library", "the river", "the small harbour",
           "the village square", "the hospital", "the school", "the garden", "the hills")
_TIMES = ("In the morning", "After lunch", "Late in the evening", "On Sunday", "Every spring",
          "Before the storm", "Last winter", "At the end of the week", "Early on Monday")
_VERBS = ("walked to", "drove past", "cleaned", "painted", "visited", "looked after", "opened",
          "waited near", "talked about", "repaired", "closed", "photographed")
_THINGS = ("the blue door", "a wooden table", "the long fence", "an old bicycle", "the kitchen window",
           "a basket of apples", "the broken lamp", "a pile of letters", "the front steps")
_FEELINGS = ("tired but happy", "a little worried", "calm", "proud of the work", "hungry",
             "ready for the next day", "surprised by the noise", "glad to be home")
_WEATHER = ("The sky was grey and the wind was cold.", "It rained for most of the afternoon.",
            "The sun came out after a week of clouds.", "A light snow covered the roofs.",
            "The air was warm and still.", "Fog lay over the fields until noon.")
_LINKS = ("Then", "After that", "Later", "Soon", "Because of this", "Meanwhile")


def _sentence(rng: random.Random) -> str:
    form = rng.randrange(6)
    name = rng.choice(_NAMES)
    cap = name[0].upper() + name[1:]
    if form == 0:
        return f"{rng.choice(_TIMES)}, {name} {rng.choice(_VERBS)} {rng.choice(_PLACES)}."
    if form == 1:
        return f"{cap} {rng.choice(_VERBS)} {rng.choice(_THINGS)} near {rng.choice(_PLACES)}."
    if form == 2:
        return rng.choice(_WEATHER)
    if form == 3:
        return f"{rng.choice(_LINKS)} {name} felt {rng.choice(_FEELINGS)}."
    if form == 4:
        return (f"{cap} said that {rng.choice(_THINGS)} at {rng.choice(_PLACES)} "
                f"needed work before {rng.choice(_TIMES).lower()}.")
    return f"{rng.choice(_LINKS)} {name} and {rng.choice(_NAMES)} {rng.choice(_VERBS)} {rng.choice(_PLACES)}."


def natural_prompt(seed: int, index: int, words: int = 300) -> str:
    """Paragraphs of plain prose (about `words` words), the same for the same seed and index."""
    rng = random.Random(f"natural-{seed}-{index}")
    paragraphs, count = [], 0
    while count < words:
        para = " ".join(_sentence(rng) for _ in range(rng.randint(3, 6)))
        paragraphs.append(para)
        count += len(para.split())
    return "Continue this story.\n\n" + "\n\n".join(paragraphs)


# -- adversarial ---------------------------------------------------------------------------
_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789#%&*+-/<=>?@^_~"


def adversarial_prompt(seed: int, index: int, words: int = 300) -> str:
    """Random strings a model is asked to continue: no pattern for a draft to guess."""
    rng = random.Random(f"adversarial-{seed}-{index}")
    parts = ["".join(rng.choice(_CHARS) for _ in range(rng.randint(3, 10))) for _ in range(words)]
    return "Continue this sequence of random strings exactly, adding more of them:\n" + " ".join(parts)


# -- any source ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Turns:
    """A conversation's user messages and fixed replies from a source, and per turn the
    source prompt (a file's item) its user message starts at."""

    users: tuple[str, ...]
    replies: tuple[str, ...]
    indexes: tuple[int, ...]


class PromptSource:
    """A non-filler source's prompts and the text a tag's prompt is made of."""

    def __init__(self, name: str, seed: int, prompts: Sequence[str] | None = None,
                 dialogues: Sequence[Sequence[tuple[str, str]]] | None = None,
                 replies: Sequence[str | int | None] | None = None) -> None:
        """`dialogues`: a file's per-item user and assistant turns; `replies`: per item the
        reply that follows its prompt (prompt_files.PromptFile), given for --output-lengths file."""
        self.name, self.seed = name, seed
        self._replies = tuple(replies) if replies is not None else None
        # with replies: the items a tag may start at, those with one (file indexes kept, so a
        # request's prompt_index is still its item in the file)
        self._pool = tuple(i for i, r in enumerate(self._replies) if r is not None) \
            if self._replies is not None else None
        if self._pool == ():
            raise ValueError(f"{name}: no item has a reply")
        if prompts is None and name not in (NATURAL, ADVERSARIAL):
            raise ValueError(f"--prompt-source: expected one of {', '.join(BUILT_IN)}, got {name!r}")
        self._file = tuple(prompts) if prompts is not None else None
        self._dialogues = tuple(tuple(d) for d in dialogues) if dialogues else None
        self._words = lru_cache(maxsize=4096)(self._split)

    def __len__(self) -> int:
        return len(self._file) if self._file is not None else GENERATED_PROMPTS

    def prompt(self, index: int) -> str:
        if self._file is not None:
            return self._file[index]
        make = natural_prompt if self.name == NATURAL else adversarial_prompt
        return make(self.seed, index)

    def reply(self, index: int) -> str | int | None:
        """The reply following item `index`'s prompt in the file: its text, or a token count the
        file gives; None where the source has no replies (built-in, or not asked for)."""
        return self._replies[index] if self._replies is not None else None

    def _split(self, index: int) -> tuple[str, ...]:
        return tuple(_WORD.findall(self.prompt(index).strip() + "\n\n"))

    def index_for(self, tag: str) -> int:
        """The prompt a tag's text starts at: the run's seed and the tag decide it (with
        replies, one of the items that has one; the text may pad on into any item)."""
        digest = hashlib.sha256(f"{self.seed}:{tag}".encode()).digest()
        if self._pool is not None:
            return self._pool[int.from_bytes(digest[:8], "big") % len(self._pool)]
        return int.from_bytes(digest[:8], "big") % len(self)

    def text(self, words: int, tag: str) -> tuple[str, int]:
        """(the first `words` words of the source from the tag's prompt on, that prompt's index)."""
        start = self.index_for(tag)
        out: list[str] = []
        i = start
        while len(out) < words:
            out.extend(self._words(i)[:words - len(out)])
            i = (i + 1) % len(self)
        return "".join(out).rstrip(), start

    @property
    def has_replies(self) -> bool:
        """Whether a conversation can replay replies from it: a built-in source, or a file
        with at least one assistant turn."""
        if self._file is None:
            return True
        return any(role == "assistant" for d in self._dialogues or () for role, _ in d)

    def turns(self, tag: str, turns: int, user_words: int, reply_words: int) -> Turns:
        """A conversation's `turns` user messages and replies (`user_words`, `reply_words`
        words each) for the conversation tagged `tag`."""
        if self._dialogues is None:
            users = [self.text(user_words, f"{tag}-u{j}") for j in range(turns)]
            replies = [self.text(reply_words, f"{tag}-a{j}")[0] for j in range(turns)]
            return Turns(tuple(u for u, _ in users), tuple(replies), tuple(i for _, i in users))
        if not self.has_replies:
            raise ValueError(f"{self.name}: no assistant turns to replay as a conversation's replies")
        pairs = self._pairs(self.index_for(tag))
        wanted = [next(pairs) for _ in range(turns)]  # grows as padding reads further on
        items = tuple(item for item, _, _ in wanted)
        users = tuple(_cut(_padded(wanted, j, 1, pairs), user_words) for j in range(turns))
        replies = tuple(_cut(_padded(wanted, j, 2, pairs), reply_words) for j in range(turns))
        return Turns(users, replies, items)

    def _pairs(self, start: int) -> Iterator[tuple[int, str, str]]:
        """(item, user turn, the assistant turns answering it) from item `start` on, wrapping round."""
        dialogues = self._dialogues or ()
        i = start
        while True:
            user: str | None = None
            reply: list[str] = []
            for role, text in dialogues[i]:
                if role == "user":
                    if user is not None:
                        yield i, user, "\n\n".join(reply)
                    user, reply = text, []
                elif user is not None:
                    reply.append(text)
            if user is not None:
                yield i, user, "\n\n".join(reply)
            i = (i + 1) % len(dialogues)


def _padded(wanted: list[tuple[int, str, str]], j: int, field: int,
            more: Iterator[tuple[int, str, str]]) -> Iterator[str]:
    """Words of turn j's user text (field 1) or reply (field 2), then of the turns after it."""
    k = j
    while True:
        pair = wanted[k] if k < len(wanted) else next(more)
        if k >= len(wanted):
            wanted.append(pair)
        yield from _WORD.findall(pair[field].strip() + "\n\n") if pair[field].strip() else ()
        k += 1


def _cut(words: Iterator[str], n: int) -> str:
    out: list[str] = []
    for word in words:
        out.append(word)
        if len(out) >= n:
            break
    return "".join(out).rstrip()
