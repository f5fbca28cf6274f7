"""Prompts of an exact token length, each with its own prefix.

Every prompt starts with a tag unique to the run, the cell and the stream,
so no cell borrows another cell's (or a warm-up's) prefix cache. Lengths
are set with the server's tokenize endpoint, counting the chat template
too, to within max(16 tokens, 0.5%); without an endpoint, a ratio of
characters per token calibrated from the server's own usage counts is used.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from bench.engines import ServerInfo

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


class PromptFactory:
    """Builds prompts of a target token count for one server."""

    def __init__(self, info: ServerInfo, api_key: str | None, run_tag: str) -> None:
        self.info = info
        self.run_tag = run_tag
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=info.base_url, headers=headers, timeout=120.0)
        self._overhead: int | None = None
        self._words_per_token: float | None = None
        self.count: Callable[[str], int | None] = self._pick_counter()

    def close(self) -> None:
        self.http.close()

    # -- counting -------------------------------------------------------
    def _pick_counter(self) -> Callable[[str], int | None]:
        if self.info.tokenize == "vllm":
            return self._count_vllm
        if self.info.tokenize == "llama.cpp":
            return self._count_llamacpp
        return lambda text: None

    def _count_vllm(self, text: str) -> int | None:
        resp = self.http.post(
            "/tokenize", json={"model": self.info.model, "messages": messages(text)}
        )
        if resp.status_code != 200:
            return None
        return int(resp.json()["count"])

    def _count_llamacpp(self, text: str) -> int | None:
        resp = self.http.post("/tokenize", json={"content": text})
        if resp.status_code != 200:
            return None
        n = len(resp.json()["tokens"])
        if self._overhead is None:
            usage = self.usage_prompt_tokens(text)
            self._overhead = (usage - n) if usage is not None else 0
        return n + self._overhead

    def usage_prompt_tokens(self, text: str) -> int | None:
        """Prompt tokens as the server counts them in a real request."""
        resp = self.http.post(
            "/v1/chat/completions",
            json={"model": self.info.model, "messages": messages(text), "max_tokens": 1,
                  "stream": False},
        )
        if resp.status_code != 200:
            return None
        usage = resp.json().get("usage") or {}
        return usage.get("prompt_tokens")

    # -- building -------------------------------------------------------
    def _calibrate(self) -> float:
        """Words per token, from the server's own counts."""
        if self._words_per_token is None:
            sample_words = 2000
            text = filler(sample_words, f"{self.run_tag}-calibration")
            n = self.count(text) or self.usage_prompt_tokens(text)
            if not n:
                raise RuntimeError("the server reports no token counts; cannot size prompts")
            self._words_per_token = sample_words / n
        return self._words_per_token

    def build(self, target: int, tag: str) -> Prompt:
        """A prompt of `target` tokens (chat template included) with a unique tag."""
        head = f"[{self.run_tag} {tag}] "
        wpt = self._calibrate()
        words = max(1, int(target * wpt))
        body_seed = f"{self.run_tag}-{tag}"
        text = head + filler(words, body_seed)
        n = self.count(text)
        if n is None:
            return Prompt(text, None)
        for _ in range(8):
            if abs(n - target) <= tolerance(target) // 2:
                break
            delta = int(round((target - n) * wpt)) or (1 if n < target else -1)
            words = max(1, words + delta)
            text = head + filler(words, body_seed)
            n = self.count(text) or n
        return Prompt(text, n)

    def variant(self, prompt: Prompt, old_tag: str, new_tag: str) -> Prompt:
        """The same body under another tag: a distinct cache prefix at the same
        length (the tag's own tokens may differ by one or two)."""
        old = f"[{self.run_tag} {old_tag}] "
        new = f"[{self.run_tag} {new_tag}] "
        return Prompt(new + prompt.text[len(old):], prompt.tokens)
