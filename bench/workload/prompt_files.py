"""A user's prompt file (`bench run --prompts FILE`), read and checked before any cell runs.

Three formats, told apart by the file's first non-blank character (no flag to
get wrong, and a file renamed .txt still reads):
- `[`: one JSON list, ShareGPT-style: `[{"conversations": [{"from": "human", "value": "..."}]}]`
  (`from`: human, gpt or system; the variant with `role`/`content` turns, under
  `conversations` or `messages`, reads too);
- `{`: JSONL, one object a line, each either `{"prompt": "..."}` or a chat
  `{"messages": [{"role": "user", "content": "..."}]}` (the two may mix). A `{"prompt"}`
  line may also give its reply, for `--output-lengths file`: `"completion"` (the reply's
  text, counted in tokens by the server) or `"output_tokens"` (a whole number of tokens).

A chat item's prompt text is its system and user turns' contents in order, joined by a
blank line; assistant turns are answers, not prompt, and are left out. Its user and
assistant turns are also kept in order (`dialogues`): a conversation cell (--turns) sends
the user turns and replays the assistant turns as the fixed replies (bench/workload/sources.py).
An item's reply (`replies`, for `--output-lengths file`) is a chat item's first assistant
turn after its first user turn, or a prompt line's "completion"/"output_tokens"; None where
it has none.
Every prompt is checked, not only the first few: a matrix cell may draw any of them.
Errors are one line naming the file, the line (JSONL) or item (JSON) and what was expected;
they never quote a prompt's text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

MAX_BYTES = 512 * 1024 * 1024  # read whole: a bigger file is refused, not streamed
_USER_ROLES = {"human": "user", "user": "user", "system": "system", "gpt": "assistant",
               "assistant": "assistant", "model": "assistant", "bot": "assistant", "chatgpt": "assistant"}


Reply = str | int | None  # an item's reply: its text, a token count, or none


class PromptFileError(ValueError):
    """A prompt file that cannot be used; the message is one line."""


@dataclass(frozen=True)
class PromptFile:
    name: str  # the file's base name, as run.yaml records it ("file:NAME")
    sha256: str  # of its bytes
    prompts: tuple[str, ...]  # each prompt's text, in file order
    format: str  # "sharegpt", "jsonl"
    # per item, its user and assistant turns in order: (("user"|"assistant", text), ...);
    # a {"prompt": ...} line is one user turn
    dialogues: tuple[tuple[tuple[str, str], ...], ...] = ()
    # per item, the reply that follows its prompt: its text, a token count given in the
    # file ("output_tokens"), or None (it has none)
    replies: tuple[Reply, ...] = ()


def _kind(value: object) -> str:
    """What a JSON value is, for an error message (never its text)."""
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "an empty string" if not value.strip() else "a string"
    return {dict: "an object", list: "a list", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__)


Dialogue = tuple[tuple[str, str], ...]


def _turns_text(turns: object, where: str, field: str) -> tuple[str, Dialogue]:
    """The prompt text of a chat item's turns (system and user contents, in order), and its
    user and assistant turns with text, in order."""
    if not isinstance(turns, list) or not turns:
        raise PromptFileError(f'{where}: field "{field}": expected a non-empty list of turns, '
                              f"got {_kind(turns) if turns != [] else 'an empty list'}")
    parts: list[str] = []
    dialogue: list[tuple[str, str]] = []
    for j, turn in enumerate(turns):
        at = f'{where}: field "{field}"[{j}]'
        if not isinstance(turn, dict):
            raise PromptFileError(f'{at}: expected an object with "from"/"value" or "role"/"content", '
                                  f"got {_kind(turn)}")
        role_key, text_key = ("from", "value") if "from" in turn else ("role", "content")
        role, text = turn.get(role_key), turn.get(text_key)
        if not isinstance(role, str) or role.lower() not in _USER_ROLES:
            got = repr(role[:20]) if isinstance(role, str) else _kind(role)
            raise PromptFileError(f'{at}: field "{role_key}": expected one of human, gpt, system '
                                  f"(or user, assistant), got {got}")
        if not isinstance(text, str):
            raise PromptFileError(f'{at}: field "{text_key}": expected a string, got {_kind(text)}')
        kind = _USER_ROLES[role.lower()]
        if kind != "assistant" and text.strip():
            parts.append(text)
        if kind != "system" and text.strip():
            dialogue.append((kind, text))
    if not any(_USER_ROLES[str(t.get("from", t.get("role"))).lower()] == "user"
               and str(t.get("value", t.get("content")) or "").strip() for t in turns):
        raise PromptFileError(f'{where}: field "{field}": expected at least one human/user turn '
                              "with text, got none")
    return "\n\n".join(parts), tuple(dialogue)


def _dialogue_reply(dialogue: Dialogue) -> str | None:
    """A chat item's reply: the first assistant turn after its first user turn."""
    asked = False
    for role, text in dialogue:
        if role == "user":
            asked = True
        elif asked:
            return text
    return None


def _line_reply(item: dict, where: str) -> Reply:
    """A prompt line's reply: its "completion" text or its "output_tokens" count, if given."""
    if "completion" in item and "output_tokens" in item:
        raise PromptFileError(f'{where}: fields "completion" and "output_tokens": expected one of '
                              "them (a reply's text, or its length in tokens), got both")
    if "completion" in item:
        text = item["completion"]
        if not isinstance(text, str) or not text.strip():
            raise PromptFileError(f'{where}: field "completion": expected a non-empty string, '
                                  f"got {_kind(text)}")
        return text
    if "output_tokens" in item:
        n = item["output_tokens"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            got = str(n) if isinstance(n, int) and not isinstance(n, bool) else _kind(n)
            raise PromptFileError(f'{where}: field "output_tokens": expected a whole number ≥ 1, '
                                  f"got {got}")
        return n
    return None


def _item_text(item: object, where: str, jsonl: bool) -> tuple[str, Dialogue, Reply]:
    if jsonl:
        expected = 'an object with "prompt" (a string) or "messages" (a list)'
    else:
        expected = 'an object with "conversations" (a list of turns)'
    if not isinstance(item, dict):
        raise PromptFileError(f"{where}: expected {expected}, got {_kind(item)}")
    if jsonl and "prompt" in item:
        text = item["prompt"]
        if not isinstance(text, str) or not text.strip():
            raise PromptFileError(f'{where}: field "prompt": expected a non-empty string, got {_kind(text)}')
        return text, (("user", text),), _line_reply(item, where)
    for field in ("messages", "conversations") if jsonl else ("conversations", "messages"):
        if field in item:
            text, dialogue = _turns_text(item[field], where, field)
            return text, dialogue, _dialogue_reply(dialogue)
    raise PromptFileError(f"{where}: expected {expected}, got an object without them")


def parse_prompts(data: bytes, name: str) -> tuple[str, list[str]]:
    """(format, prompt texts) of a prompt file's bytes; PromptFileError names `name`."""
    fmt, items = _parse(data, name)
    return fmt, [text for text, _, _ in items]


def parse_items(data: bytes, name: str) -> tuple[str, list[tuple[str, Dialogue]]]:
    """(format, per item its prompt text and dialogue) of a prompt file's bytes."""
    fmt, items = _parse(data, name)
    return fmt, [(text, dialogue) for text, dialogue, _ in items]


def _parse(data: bytes, name: str) -> tuple[str, list[tuple[str, Dialogue, Reply]]]:
    """(format, per item its prompt text, dialogue and reply) of a prompt file's bytes."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise PromptFileError(f"{name} line {line}: not UTF-8 text") from None
    head = text.lstrip()[:1]
    if head == "[":
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{name} line {exc.lineno}: not JSON "
                                  f"({exc.msg} at column {exc.colno})") from None
        if not items:
            raise PromptFileError(f"{name}: expected a list of conversations, got an empty list")
        return "sharegpt", [_item_text(item, f"{name} item {i}", False) for i, item in enumerate(items)]
    if head == "{":
        prompts = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PromptFileError(f"{name} line {n}: expected one JSON object per line "
                                      f"({exc.msg} at column {exc.colno})") from None
            prompts.append(_item_text(item, f"{name} line {n}", True))
        return "jsonl", prompts
    if not head:
        raise PromptFileError(f"{name}: empty; expected a JSON list (ShareGPT) or JSONL prompts")
    raise PromptFileError(f"{name} line 1: expected a JSON list (ShareGPT, starting with '[') or "
                          "JSONL objects (starting with '{')")


def read_prompt_file(path: Path) -> PromptFile:
    """A prompt file read whole and checked (`PromptFileError`: one line)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise PromptFileError(f"{path.name}: {size} bytes; at most {MAX_BYTES} read")
        data = path.read_bytes()
    except OSError as exc:
        raise PromptFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    fmt, items = _parse(data, path.name)
    return PromptFile(path.name, hashlib.sha256(data).hexdigest(), tuple(t for t, _, _ in items), fmt,
                      tuple(d for _, d, _ in items), tuple(r for _, _, r in items))


def replied_items(pf: PromptFile) -> tuple[int, ...]:
    """The items of `pf` that have a reply, in file order (`--output-lengths file`: a request
    asks its item's reply length, so only those items are drawn); PromptFileError (one line)
    if none has one."""
    keep = tuple(i for i, r in enumerate(pf.replies) if r is not None)
    if not keep:
        expected = ("an assistant (gpt) turn after a user turn" if pf.format == "sharegpt" else
                    'an assistant message after a user message, or "completion"/"output_tokens"')
        raise PromptFileError(f"{pf.name}: no item has a reply to take its output length from; "
                              f"expected {expected}")
    return keep
