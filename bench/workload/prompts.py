"""Prompts of an exact token length, each with its own prefix.

Every prompt starts with a tag unique to the run, the cell and the stream,
so no cell borrows another cell's (or a warm-up's) prefix cache. The filler
is whole words, so lengths are steered by a words-per-token ratio: measured
once per run on a 2,000-word text, then corrected with the server's tokenize
endpoint (chat template counted too) until a prompt is within max(16 tokens,
0.5%) of its target. Without that endpoint the ratio comes from the
prompt_tokens the server reports for one real request, prompts are sized
from it alone, and their exact length is unknown until the server answers.
With another prompt source (bench/workload/sources.py) the words after the tag
are that source's, sized the same way; the ratio is measured on its text.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from bench.core.auth import bearer_header
from bench.server.answers import ABSENT, BadAnswer, integer, json_body, show, status_detail, transport
from bench.server.engine_profiles import DIALECTS, TOKENIZE_PATH
from bench.server.engines import ServerError, ServerInfo
from bench.server.server_info import key_refused
from bench.workload.sources import PromptSource

_WORDS = (
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program "
    "question work government number night point home water room mother area money "
    "story fact month lot right study book eye job word business issue side kind head "
    "house service friend father power hour game line end member law car city community "
    "name president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason "
    "research girl guy moment air teacher force education river mountain garden window"
).split()

MIN_TOLERANCE = 16
REL_TOLERANCE = 0.005
# Words per token a real tokenizer can give for the filler's common English
# words (about 0.5 to 1); a count outside this is a broken answer, and
# sizing from it would build absurd prompts.
MIN_WPT, MAX_WPT = 0.05, 20.0
PLAUSIBLE_OVERHEAD = 4096  # room for a long chat template / system prompt in a count


def tolerance(target: int) -> int:
    return max(MIN_TOLERANCE, int(target * REL_TOLERANCE))


def filler(n_words: int, seed: str) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(n_words))


def messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@dataclass
class Prompt:
    text: str
    tokens: int | None  # as counted by the server before sending; None if unknown
    # The chat messages sent, where they are more than one user message of `text`
    # (a shared system prefix, a conversation's history); None: [user: text]
    messages: list[dict[str, str]] | None = None
    # Which prompt of a non-filler source the text starts at (bench/workload/sources.py);
    # None: filler
    index: int | None = None
    # With --output-lengths file: the max_tokens its requests ask, its item's reply length
    # (PromptFactory.reply_tokens); None otherwise
    reply_tokens: int | None = None


def retag(prompt: Prompt, run_tag: str, old_tag: str, new_tag: str) -> Prompt:
    """`prompt` under another tag (`PromptFactory.variant`; a shard process
    makes its streams' prompts from the cell's base prompt with it)."""
    old = f"[{run_tag} {old_tag}] "
    new = f"[{run_tag} {new_tag}] "
    return Prompt(new + prompt.text[len(old):], prompt.tokens, index=prompt.index,
                  reply_tokens=prompt.reply_tokens)


class PromptFactory:
    """Builds prompts of a target token count for one server.

    Every server problem while sizing prompts (no answer, an HTTP error, a
    malformed or implausible count) raises `ServerError` with one line naming
    the endpoint: `build` is the first thing each cell asks of the server, so
    this is where a server that died between cells is noticed."""

    def __init__(self, info: ServerInfo, api_key: str | None, run_tag: str,
                 source: PromptSource | None = None) -> None:
        self.info = info
        self.run_tag = run_tag
        self.source = source  # None: filler
        # --output-lengths file: the most a reply may ask (the run's max output); None: the
        # run takes no lengths from replies and prompts carry none
        self.reply_cap: int | None = None
        self._reply_tokens: dict[int, int] = {}
        self.http = httpx.Client(base_url=info.base_url, headers=bearer_header(api_key),
                                 timeout=120.0)
        self._overhead: int | None = None
        self._words_per_token: float | None = None
        self._tokenize_seen = False  # /tokenize has answered once: it exists
        self._dialect = DIALECTS.get(info.tokenize) if info.tokenize else None
        self._counter: Callable[[str], int | None] | None = (
            None if self._dialect is None else self._count_prompt)

    def close(self) -> None:
        self.http.close()

    # -- asking the server ---------------------------------------------
    def _post(self, path: str, body: dict, doing: str) -> httpx.Response:
        """POST, turning a transport failure or a refused key into ServerError."""
        try:
            resp = self.http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise ServerError(f"{path}: no answer while {doing} ({transport(exc)})") from None
        if resp.status_code in (401, 403):
            raise key_refused(path, resp.status_code)
        return resp

    def _tokenize(self, body: dict, doing: str = "sizing a prompt") -> int | None:
        """The token count in the /tokenize answer to `body`; None if the
        server has no such endpoint (404 on the first call: sizing falls
        back to usage)."""
        path = TOKENIZE_PATH
        resp = self._post(path, body, doing)
        if resp.status_code in ABSENT and not self._tokenize_seen:
            self._counter = None
            return None
        if resp.status_code != 200:
            raise ServerError(f"{path}: answered HTTP {resp.status_code}"
                              f"{status_detail(resp)}, expected 200 with a token count")
        self._tokenize_seen = True
        try:
            return self._dialect.read(json_body(resp, path))
        except BadAnswer as exc:
            raise ServerError(str(exc)) from None

    # -- counting -------------------------------------------------------
    def count(self, text: str) -> int | None:
        """Tokens of `text` sent as a chat prompt, by the server's own
        tokenizer; None if it has no tokenize endpoint. A count no tokenizer
        could give for this text (0, or far off its word count) is an error."""
        if self._counter is None:
            return None
        n = self._counter(text)
        if n is None:
            return None
        words = len(text.split())
        low, high = int(words / MAX_WPT), int(words / MIN_WPT) + PLAUSIBLE_OVERHEAD
        if not max(1, low) <= n <= high:
            raise ServerError(f"/tokenize: {n} tokens for a {words}-word text is not plausible "
                              f"(expected {max(1, low)} to {high}); cannot size prompts")
        return n

    @property
    def can_tokenize(self) -> bool:
        """Whether the server has a tokenize endpoint (as far as known yet)."""
        return self._counter is not None

    def count_output(self, text: str) -> int | None:
        """Tokens of streamed output text by the server's tokenizer: the bare
        text, no chat template, no special tokens (a BOS would add one to each
        request). None if the server has no tokenize endpoint. Blocking: for
        after a cell's window, never inside it."""
        if self._counter is None:
            return None
        return self._tokenize(self._dialect.bare(self.info.model, text),
                              "counting a stream's tokens")

    def short(self, tag: str, words: int = 32) -> Prompt:
        """A short prompt with its own tag, for a request that is not measured."""
        return Prompt(f"[{self.run_tag} {tag}] " + filler(words, f"{self.run_tag}-{tag}"), None)

    def _count_prompt(self, text: str) -> int | None:
        """A chat prompt's tokens: counted with its template where the dialect
        can, else the bare text's count plus the template's own tokens,
        measured once (usage of a short text minus its bare count)."""
        model, dialect = self.info.model, self._dialect
        if dialect.chat is not None:
            return self._tokenize(dialect.chat(model, text))
        n = self._tokenize(dialect.bare(model, text))
        if n is None:
            return None
        if self._overhead is None:
            sample = filler(32, f"{self.run_tag}-overhead")  # fits any context
            bare = self._tokenize(dialect.bare(model, sample)) or 0
            usage = self.usage_prompt_tokens(sample)
            self._overhead = (usage - bare) if usage is not None else 0
        return n + self._overhead

    def usage_prompt_tokens(self, text: str) -> int | None:
        """Prompt tokens as the server counts them in a real request; None if
        its answer carries no usage."""
        path = "/v1/chat/completions"
        resp = self._post(
            path,
            {"model": self.info.model, "messages": messages(text), "max_tokens": 1,
             "stream": False},
            "calibrating prompt sizes",
        )
        if resp.status_code != 200:
            raise ServerError(f"{path}: answered HTTP {resp.status_code}{status_detail(resp)} "
                              "to a 1-token request while calibrating prompt sizes")
        try:
            usage = json_body(resp, path).get("usage")
            if usage is None:
                return None
            if not isinstance(usage, dict):
                raise BadAnswer(f"{path}: field usage: expected an object, got {show(usage)}")
            if usage.get("prompt_tokens") is None:
                return None
            return integer(usage["prompt_tokens"], path, "usage.prompt_tokens")
        except BadAnswer as exc:
            raise ServerError(str(exc)) from None

    # -- building -------------------------------------------------------
    def _calibrate(self) -> float:
        """Words per token, from the server's own counts."""
        if self._words_per_token is None:
            sample_words = 2000
            text = self._body(sample_words, "calibration")[0]
            n = self.count(text) or self.usage_prompt_tokens(text)
            if not n:
                raise ServerError("the server reports no token counts (no /tokenize, no usage "
                                  "in its answers); cannot size prompts")
            wpt = sample_words / n
            if not MIN_WPT <= wpt <= MAX_WPT:
                raise ServerError(
                    f"the server counts {n} tokens in a {sample_words}-word text: not plausible "
                    f"(expected {int(sample_words / MAX_WPT)} to {int(sample_words / MIN_WPT)}); "
                    "cannot size prompts")
            self._words_per_token = wpt
        return self._words_per_token

    def build(self, target: int, tag: str) -> Prompt:
        """A prompt of `target` tokens (chat template included) with a unique tag."""
        head = f"[{self.run_tag} {tag}] "
        wpt = self._calibrate()
        words = max(1, int(target * wpt))
        body, index = self._body(words, tag)
        reply = self.reply_tokens(index) if index is not None and self.reply_cap is not None else None
        text = head + body
        n = self.count(text)
        if n is None:
            return Prompt(text, None, index=index, reply_tokens=reply)
        for _ in range(8):
            if abs(n - target) <= tolerance(target) // 2:
                break
            delta = int(round((target - n) * wpt)) or (1 if n < target else -1)
            words = max(1, words + delta)
            text = head + self._body(words, tag)[0]
            n = self.count(text) or n
        return Prompt(text, n, index=index, reply_tokens=reply)

    def _body(self, words: int, tag: str) -> tuple[str, int | None]:
        """`words` words of the run's source for `tag`, and the source prompt they start at
        (filler: seeded by the session's tag, as it always was; no index)."""
        if self.source is None:
            return filler(words, f"{self.run_tag}-{tag}"), None
        return self.source.text(words, tag)

    def tokens_of(self, text: str, cap: int) -> int:
        """Tokens of `text` as a chat prompt, at most about `cap` (a text far longer is
        not sent to be counted): the server's count, else estimated by the run's ratio."""
        wpt = self._calibrate()
        if len(text.split()) > cap * wpt * 1.5:
            return cap
        n = self.count(text)
        return n if n is not None else max(1, round(len(text.split()) / wpt))

    def reply_tokens(self, index: int) -> int:
        """Tokens of the reply that follows source item `index`'s prompt, at most `reply_cap`:
        a count the file gives, else the reply's text counted as `tokens_of` counts a prompt
        (the server's tokenizer, else the run's words-per-token ratio; a text far past the cap
        is not sent) but bare, without a chat template: a reply is generated, not templated.
        Counted once per item. Blocking."""
        cap = self.reply_cap
        if self.source is None or cap is None:
            raise ValueError("reply lengths: only with a --prompts file and --output-lengths file")
        if index not in self._reply_tokens:
            reply = self.source.reply(index)
            if reply is None:  # index_for starts no prompt at such an item
                raise ValueError(f"{self.source.name}: item {index} has no reply to take a length from")
            if isinstance(reply, int):
                n = reply
            else:
                wpt = self._calibrate()
                words = len(reply.split())
                if words > cap * wpt * 1.5:
                    n = cap
                else:
                    n = self.count_output(reply) or max(1, round(words / wpt))
            self._reply_tokens[index] = max(1, min(cap, n))
        return self._reply_tokens[index]

    def words_for(self, tokens: int) -> int:
        """Filler words for about `tokens` tokens, by the run's words-per-token
        ratio (a conversation's messages are sized with it, not one by one)."""
        return max(1, int(tokens * self._calibrate()))

    def variant(self, prompt: Prompt, old_tag: str, new_tag: str) -> Prompt:
        """The same body under another tag: a distinct cache prefix at the same
        length (the tag's own tokens may differ by one or two)."""
        return retag(prompt, self.run_tag, old_tag, new_tag)
