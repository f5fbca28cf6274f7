"""Removing secrets from anything that leaves the process (pure).

Launch commands, run cards, URLs and error texts may carry API keys, and
whatever the collector or the importer writes is published. Everything goes
through `redact` (or `redact_tree` for nested data) first, with the run's own
key(s) added as literal secrets.

Two kinds of rule, applied in this order:

1. Literal secrets (the run's own key, a URL password): every occurrence of
   the exact value, also URL-encoded. Values of 8+ characters are removed
   wherever they appear, even inside a longer word; 4-7 characters only as a
   whole word (so a key "test" does not eat "tested"); shorter ones are not
   searched for (a key "a" would eat prose) and rely on the shapes below.
   From 4 characters, the value's hex and base64 forms too, wherever they
   appear, also inside a longer base64 string (`_encoded_forms`).
2. Shapes: a private-key block; well-known token prefixes (``sk-``, ``hf_``,
   ``ghp_``, ...); the password of a URL; secret flags (``--api-key``,
   ``-k``, ``--key``, ``--token``, ``--password``, ``--hf-token`` and every
   ``--*-key``/``--*-token``/``--*-secret``/``--*-password``); secret
   assignments (``OPENAI_API_KEY=``, ``HF_TOKEN=``, ``api_key="..."``,
   ``?api_key=...``); JSON/YAML keys (``"api_key": "K"``, ``token: K``);
   headers (``Authorization: Bearer|Basic X``, ``x-api-key: X``); a bare
   ``Bearer X``; ``curl -u user:pass``.

A name is secret when its last word (split at ``-``, ``_``, ``.`` and
camelCase) is key, apikey, token, secret, password, passwd, passphrase or
credential(s), so ``max_tokens``, ``--max-num-batched-tokens``,
``tokenizer``, ``keyboard`` and ``key_value`` are not; ``bos_token``-like
special-token names and ``sort_key``-like names are not either. A lone
``key`` is secret only as a flag (``--key``), not as ``key=``/``key:``, which
prose and configs use for anything.

The value after a secret flag, header or ``Bearer`` separated by a space is
left alone when it cannot be a key: another flag (``--api-key --port 1``), a
placeholder (``<redacted>``, ``<your-key>``, ``$VLLM_API_KEY``, ``${X}``,
``***``, ``...``), or one of a short list of English function words ("pass
--api-key or set OPENAI_API_KEY" is prose). After ``=``, ``:`` or inside an
argument list the value is always taken (bar placeholders): no one writes
prose as ``--api-key=or``. ``-k`` also keeps URLs and numbers (``curl -k
https://...``, ``sort -k 2``). A bare ``Bearer X`` outside a header needs X
to look like a credential (a digit, a symbol or 20+ characters), so "Bearer
tokens" stays prose.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import functools
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

REDACTED = "<redacted>"
MIN_SECRET_LEN = 4  # shorter literal secrets are not searched for
SUBSTRING_SECRET_LEN = 8  # from this length a literal secret is removed inside words too

_SECRET_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "passphrase",
    "credential", "credentials",
})
_SECRET_SUFFIXES = ("password", "passwd", "secret", "apikey")  # PGPASSWORD, OPENAIAPIKEY
# Words before "token" that make it a vocabulary token, not a credential.
_SPECIAL_TOKENS = frozenset({
    "bos", "eos", "pad", "unk", "sep", "cls", "mask", "stop", "start", "end", "special",
    "think", "image", "audio", "video", "sentinel", "eot", "eom", "fim", "vision", "first",
    "last", "next", "per", "each", "input", "output", "prompt", "completion", "max", "min", "num",
})
# Words before "key" that make it a data key, not a credential.
_DATA_KEYS = frozenset({
    "sort", "primary", "foreign", "partition", "routing", "shard", "group", "lookup", "hash",
    "cache", "dict", "map", "hot", "short", "index", "row", "column", "metric", "cell",
})
# Words that follow a flag in prose and are never a key.
_PROSE = frozenset("""
a an and are as at be been but by can could did do does e.g. etc first flag flags for from
given has have here i.e. if in instead is it its may might missing must no none nor not of
on only option options or our see set should so that the their then there these they this
those to too unset value values was we were when where which will with without would you
your above below required optional empty null argument arguments also again
""".split())

_WORD_SPLIT = re.compile(r"[-_.\s]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_PLACEHOLDER = re.compile(
    r"<[^<>\n]*>|\$[A-Za-z_][A-Za-z0-9_]*|\$\{[^}\n]*\}|\$\{\{.*\}\}|\$\(.*\)|\{\{.*\}\}"
    r"|[*.•xX]{3,}|…|redacted|REDACTED|null|None|none|true|false"
)
_URLISH = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|[\d.,:]+$")


def is_secret_name(name: str, bare_key: bool = False) -> bool:
    """Whether a flag, variable, header or field name holds a credential.

    bare_key: whether a lone "key" counts (true for the ``--key`` flag only).
    """
    words = [w.lower() for w in _WORD_SPLIT.split(name.strip("-_. ")) if w]
    if not words:
        return False
    last, before = words[-1], (words[-2] if len(words) > 1 else None)
    if last == "keys":
        return before == "api"
    if last == "key":
        return bare_key if before is None else before not in _DATA_KEYS
    if last == "token":
        return before not in _SPECIAL_TOKENS
    return last in _SECRET_WORDS or last.endswith(_SECRET_SUFFIXES)


def _unquote(value: str) -> tuple[str, str]:
    """(quote character or "", the value inside)."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[0], value[1:-1]
    return "", value


def _kept(value: str, prose: bool = False, short: bool = False) -> bool:
    """Whether a value in a secret's place is not a secret (placeholder, prose)."""
    quote_char, inner = _unquote(value)
    inner = inner.strip()
    if not inner or _PLACEHOLDER.fullmatch(inner):
        return True
    if prose and not quote_char and inner.lower().rstrip(".,;:!?)") in _PROSE:
        return True
    return short and bool(_URLISH.match(inner))


def _mask(value: str) -> str:
    quote_char, _ = _unquote(value)
    return f"{quote_char}{REDACTED}{quote_char}"


# -- literal secrets -----------------------------------------------------------


def _encoded_forms(secret: str) -> set[str]:
    """The secret's bytes as a launch command may carry them encoded
    (``echo <b64> | base64 -d > /run/k``): hex, lower and upper case; the
    standard and URL-safe base64 of the secret alone, with and without ``=``
    padding; and, for each of the three byte alignments the secret can sit at
    inside a longer encoded string (``base64("Bearer " + KEY)`` holds it at
    offset 1 of a 3-byte group), the run of base64 characters that its bytes
    alone decide. The one character at either end of that run that also
    carries bits of a neighbouring byte stays (at most 4 of the key's bits)."""
    raw = secret.encode("utf-8")
    forms = {raw.hex(), raw.hex().upper()}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode("ascii")
        forms |= {whole, whole.rstrip("=")}
        for offset in range(3):  # the secret's first byte at this place in a 3-byte group
            text = encode(bytes(offset) + raw).decode("ascii")
            first = -(-8 * offset // 6)  # the first character made of its bits only
            last = 8 * (offset + len(raw)) // 6  # past the last such character
            forms.add(text[first:last])
    return {f for f in forms if len(f) >= MIN_SECRET_LEN}


@functools.lru_cache(maxsize=64)
def _variants(secrets: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    """(form, wherever) for every form of the secrets worth searching for,
    longest first: the secret and its URL-encoding (wherever: from
    SUBSTRING_SECRET_LEN characters, else as a whole word only), and its
    encoded forms (always wherever: an encoded key sits inside longer text)."""
    found: dict[str, bool] = {}
    for secret in secrets:
        if not isinstance(secret, str):
            continue
        for plain in {secret, secret.strip()}:
            for form in (plain, quote(plain, safe="")):
                if len(form) >= MIN_SECRET_LEN:
                    found[form] = found.get(form, False) or len(form) >= SUBSTRING_SECRET_LEN
            if len(plain) >= MIN_SECRET_LEN:
                found.update(dict.fromkeys(_encoded_forms(plain), True))
    return tuple(sorted(found.items(), key=lambda item: len(item[0]), reverse=True))


def _replace_literals(text: str, secrets: Iterable[str]) -> str:
    for secret, wherever in _variants(tuple(secrets)):
        if secret not in text:
            continue
        if wherever:
            text = text.replace(secret, REDACTED)
        else:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", REDACTED, text)
    return text


# -- shapes --------------------------------------------------------------------

_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.DOTALL
)
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"sk-(?P<sk>[A-Za-z0-9_-]{16,})"  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-), OpenRouter
    r"|hf_[A-Za-z0-9]{20,}|api_org_[A-Za-z0-9]{20,}"  # Hugging Face user and org tokens
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|nvapi-[A-Za-z0-9_-]{20,}"  # NVIDIA NGC / build.nvidia.com
    r"|gsk_[A-Za-z0-9]{20,}|r8_[A-Za-z0-9]{20,}|pplx-[A-Za-z0-9]{20,}"  # Groq, Replicate, Perplexity
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*"  # JWT
    r")"
)
_HYPHENATED_WORDS = re.compile(r"[a-z]+(?:-[a-z]+)+")  # sk-learn-compatible-models is prose
_URL_USERINFO = re.compile(
    r"(?P<scheme>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s/?#@:'\"<>]*):(?P<pw>[^\s/?#'\"]*)@"
)
_VALUE = r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`]+)"
# A flag, then "=", or (never followed by another flag) spaces, a line continuation,
# the next item of a YAML list, or the next element of a JSON/Python list.
_FLAG = re.compile(
    r"(?<![\w-])(?P<flag>--?[A-Za-z][\w-]*)"
    r"(?P<sep>=|(?:[ \t]*\\\r?\n[ \t]*|[ \t]*\r?\n[ \t]*-[ \t]+|[ \t]+|[\"'][ \t]*,[ \t]*[\"'])(?!-))"
    + _VALUE
)
_ASSIGN = re.compile(
    r"(?<![\w-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"(?P<sep>=(?!=)|[ \t]*=[ \t]*(?=[\"']))"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`&;,]*)"
)
_QUOTED_KEY = re.compile(
    r"(?P<q>[\"'])(?P<name>[A-Za-z_][\w.-]*)(?P=q)(?P<sep>[ \t]*:[ \t]*)"
    r"(?P<value>\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|(?![{\[])[^\s,}\]\"']+)"
)
_YAML_KEY = re.compile(
    r"(?P<pre>^[ \t]*(?:-[ \t]+)?|[{,][ \t]*)(?P<name>[A-Za-z_][\w.-]*)(?P<sep>[ \t]*:[ \t]+)"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s,}#'\"]+)(?=[ \t]*(?:#.*)?$|[ \t]*[,}])",
    re.MULTILINE,
)
_HEADER = re.compile(
    r"(?<![\w-])(?P<name>[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)+)(?P<sep>[ \t]*:[ \t]*)"
    r"(?P<value>[^\s\"',;]+)"
)
_AUTHORIZATION = re.compile(
    r"(?<![\w-])(?P<name>(?:proxy-)?authorization)(?P<sep>[\"']?[ \t]*[:=][ \t]*[\"']?)"
    r"(?:(?P<scheme>bearer|basic|token|digest|apikey|bot|key|negotiate|ntlm)[ \t]+)?"
    r"(?P<value>[^\s\"',;]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?<![\w-])(?P<scheme>bearer)[ \t]+(?P<value>[^\s\"',;]+)", re.IGNORECASE)
_USER_PASS = re.compile(
    r"(?<![\w-])(?P<flag>-u|--user|--proxy-user)(?P<sep>=|[ \t]+)(?P<q>[\"']?)"
    r"(?P<user>[^\s:\"']+):(?P<pw>[^\s\"']+)(?P=q)"
)


def _flag(m: re.Match[str]) -> str:
    flag, sep, value = m["flag"], m["sep"], m["value"]
    name = flag.lstrip("-")
    short = flag == "-k"
    if not short and (len(name) < 2 or not is_secret_name(name, bare_key=True)):
        return m[0]
    explicit = "=" in sep or "," in sep
    if _kept(value, prose=not explicit, short=short):
        return m[0]
    return f"{flag}{sep}{_mask(value)}"


def _named(prose: bool, bare_key: bool = False) -> Callable[[re.Match[str]], str]:
    """A replacement masking the value of a match whose name is secret."""
    def sub(m: re.Match[str]) -> str:
        if not is_secret_name(m["name"], bare_key) or _kept(m["value"], prose=prose):
            return m[0]
        start, end = m.span("value")
        return m[0][: start - m.start()] + _mask(m["value"]) + m[0][end - m.start():]
    return sub


def _authorization(m: re.Match[str]) -> str:
    if _kept(m["value"], prose=not m["scheme"]):
        return m[0]
    scheme = f"{m['scheme']} " if m["scheme"] else ""
    return f"{m['name']}{m['sep']}{scheme}{REDACTED}"


def _bearer(m: re.Match[str]) -> str:
    value = m["value"]
    credential = len(value) >= 20 or not value.isalpha()
    if not credential or _kept(value, prose=True):
        return m[0]
    return f"{m['scheme']} {REDACTED}"


def _token_shape(m: re.Match[str]) -> str:
    body = m["sk"]
    if body is not None and _HYPHENATED_WORDS.fullmatch(body):
        return m[0]
    return REDACTED


def _url_userinfo(m: re.Match[str]) -> str:
    if _kept(m["pw"]):
        return m[0]
    return f"{m['scheme']}{m['user']}:{REDACTED}@"


def _user_pass(m: re.Match[str]) -> str:
    if (m["user"].isdigit() and m["pw"].isdigit()) or _kept(m["pw"]):  # docker -u 1000:1000
        return m[0]
    return f"{m['flag']}{m['sep']}{m['q']}{m['user']}:{REDACTED}{m['q']}"


_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_PRIVATE_KEY, lambda m: REDACTED),
    (_TOKEN_SHAPES, _token_shape),
    (_URL_USERINFO, _url_userinfo),
    (_USER_PASS, _user_pass),
    (_AUTHORIZATION, _authorization),
    (_FLAG, _flag),
    (_ASSIGN, _named(prose=False)),
    (_QUOTED_KEY, _named(prose=False)),
    (_YAML_KEY, _named(prose=False)),
    (_HEADER, _named(prose=True)),
    (_BEARER, _bearer),
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Text with every secret replaced by ``<redacted>``: the given literal
    secrets wherever they appear, and the shapes listed in the module's doc.
    Idempotent; text without secrets comes back unchanged."""
    if not text or not isinstance(text, str):
        return text
    text = _replace_literals(text, secrets)
    for pattern, sub in _RULES:
        text = pattern.sub(sub, text)
    return text


def redact_literals(text: str, secrets: Iterable[str]) -> str:
    """Text with only the literal secrets (and their encoded forms) replaced:
    for long text no shape can matter in, such as a model's answer, where
    the shapes would cost ~4 ms per 2 KiB and the literals ~10 µs."""
    if not text or not isinstance(text, str):
        return text
    return _replace_literals(text, secrets)


def redact_tree(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of nested data (dicts, lists, tuples, dataclasses) with every
    string redacted, and the whole value of any field named like a secret
    (``{"api_key": "K"}``) replaced: a run card's every field reaches files."""
    secrets = tuple(secrets)

    def walk(value: Any, name: str | None = None) -> Any:
        if isinstance(value, str):
            if name is not None and is_secret_name(name) and not _kept(value):
                return REDACTED
            return redact(value, secrets)
        if isinstance(value, dict):
            return {walk(k): walk(v, k if isinstance(k, str) else None) for k, v in value.items()}
        if isinstance(value, list):  # {"api_keys": [...]}: each item is a secret
            return [walk(v, name) for v in value]
        if isinstance(value, tuple):
            items = [walk(v, name) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            clone = copy.copy(value)
            for f in dataclasses.fields(value):
                object.__setattr__(clone, f.name, walk(getattr(value, f.name), f.name))
            return clone
        return value

    return walk(obj)


def _userinfo(url: str) -> tuple[int, int] | None:
    """(start, end) of a URL's userinfo (before the last "@" of the authority)."""
    scheme = re.match(r"\s*[A-Za-z][A-Za-z0-9+.-]*://", url)
    if not scheme:
        return None
    start = scheme.end()
    end = start
    while end < len(url) and url[end] not in "/?#":
        end += 1
    at = url.rfind("@", start, end)
    return (start, at) if at >= 0 else None


def url_secrets(url: str) -> list[str]:
    """The secrets a URL carries, to add to the run's list: the password of its
    userinfo (a lone user name too: ``https://TOKEN@host`` is how tokens are
    passed), raw and decoded, and the values of secret query parameters."""
    if not isinstance(url, str):
        return []
    found: list[str] = []
    span = _userinfo(url)
    if span:
        user, colon, password = url[span[0]:span[1]].partition(":")
        for part in ([password] if colon else [user]):
            found += [part, unquote(part)]
    query = url.partition("?")[2].partition("#")[0]
    for name, value in parse_qsl(query, keep_blank_values=False):
        if is_secret_name(name):
            found.append(value)
    out: list[str] = []
    for item in found:
        if item and not _kept(item) and item not in out:
            out.append(item)
    return out


def redact_url(url: str) -> str:
    """A URL fit for printing: its password (or lone user name), secret query
    parameters and token shapes replaced by ``<redacted>``."""
    if not isinstance(url, str):
        return url
    span = _userinfo(url)
    if span:
        user, colon, _ = url[span[0]:span[1]].partition(":")
        info = f"{user}:{REDACTED}" if colon else REDACTED
        url = url[: span[0]] + info + url[span[1]:]
    return redact(url, url_secrets(url))
