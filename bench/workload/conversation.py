"""Multi-turn conversations whose every turn resends the history: a
conversation cell's workload.

Why fixed replies: the history a turn resends holds the assistant's earlier
replies; with what the model generated they would differ per server and per
run, so context growth would too. Here each reply is fixed filler text, so
turn j's prompt is the same on every server: the system prompt, then per
earlier turn its user message and its fixed reply, then a new user message.
Sizes: with T turns at context L, the history grows by step = L ÷ T a turn,
of which the reply is min(128, step ÷ 4) tokens and the user message the
rest, so turn T's prompt is about L (docs/methodology.md). With a prompt
source the user messages and replies are the source's text at the same sizes
(a chat file's own user turns and replies, in order: sources.PromptSource.turns).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.workload.prompts import Prompt, filler
from bench.workload.sources import PromptSource

MAX_REPLY_TOKENS = 128


def turn_sizes(context: int, turns: int) -> tuple[int, int]:
    """(user tokens, reply tokens) of every turn (pure)."""
    step = max(2, context // max(1, turns))
    reply = max(1, min(MAX_REPLY_TOKENS, step // 4))
    return step - reply, reply


@dataclass(frozen=True)
class Conversation:
    """One stream's conversation: its system prompt, per turn its user
    message and the fixed reply that follows it in later turns' history."""

    system: str
    users: tuple[str, ...]
    replies: tuple[str, ...]
    indexes: tuple[int, ...] = ()  # per turn, the source prompt its user message starts at

    def messages(self, turn: int) -> list[dict[str, str]]:
        """What turn `turn` (1-based) sends: the whole history, then its user message."""
        out = [{"role": "system", "content": self.system}]
        for j in range(turn - 1):
            out += [{"role": "user", "content": self.users[j]},
                    {"role": "assistant", "content": self.replies[j]}]
        out.append({"role": "user", "content": self.users[turn - 1]})
        return out

    def prompt(self, turn: int) -> Prompt:
        index = self.indexes[turn - 1] if self.indexes else None
        return Prompt(self.users[turn - 1], None, self.messages(turn), index=index)


def conversation(run_tag: str, context: int, concurrency: int, stream: int, turns: int,
                 user_words: int, reply_words: int, source: PromptSource | None = None) -> Conversation:
    """Stream `stream`'s conversation (pure): its system prompt opens with a
    tag unique to the run, the cell and the conversation, so conversations
    share nothing; filler user messages are seeded by it, replies by turn alone
    (a source's: both chosen by the tag)."""
    tag = f"[{run_tag} t{context}-c{concurrency}-v{stream}]"
    if source is not None:
        # chosen by the run's prompt seed and the cell, not the run's tag: made again from the seed
        got = source.turns(f"t{context}-c{concurrency}-v{stream}", turns, user_words, reply_words)
        users = tuple(f"{tag} turn {j + 1}: " + text for j, text in enumerate(got.users))
        return Conversation(f"{tag} You are a helpful assistant.", users, got.replies, got.indexes)
    users = tuple(f"{tag} turn {j + 1}: " + filler(user_words, f"{tag}-u{j}") for j in range(turns))
    replies = tuple(filler(reply_words, f"reply-{j}") for j in range(turns))
    return Conversation(f"{tag} You are a helpful assistant.", users, replies)
