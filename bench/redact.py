"""Removing secrets from anything that leaves the process (pure).

Launch commands, URLs and error texts may carry API keys. Everything the
collector writes goes through `redact` first, with the run's own key(s)
added to the list of literal secrets.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
_SECRET_NAME = r"[A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Za-z0-9_]*"
_FLAG = re.compile(
    r"(?<![\w-])(--?[A-Za-z0-9-]*(?:api[-_]?key|token|secret|password|passwd)[A-Za-z0-9-]*)(=|\s+)"
    r"(\"[^\"]*\"|'[^']*'|\S+)",
    re.IGNORECASE,
)
_ENV = re.compile(rf"\b({_SECRET_NAME})=(\"[^\"]*\"|'[^']*'|\S+)", re.IGNORECASE)
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
_TOKEN_LIKE = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+)"
)
_URL_USERINFO = re.compile(r"(\w+://)[^/\s:@]+:[^/\s@]+@")


def redact(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """Replace secret values in text: known literal secrets, values of
    key/token/secret/password flags and environment assignments, bearer
    tokens, token-shaped strings and passwords in URLs."""
    if not text:
        return text
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    text = _FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _ENV.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    text = _TOKEN_LIKE.sub(REDACTED, text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return text
