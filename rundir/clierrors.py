"""How both command lines (`bench`, `build-site`) report a bad flag.

Why here: the collector and the builder never import each other, yet a user
should see the same thing from either when a flag is wrong: one line on
stderr, `error: --flag: what was expected`, never click's three-line usage
block or a traceback, and exit status 2 (EXIT_USAGE) for every bad flag.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and failed (no server, an invalid run, ...)
EXIT_USAGE = 2  # a bad flag, or flags that contradict each other


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print `error: MESSAGE` as one line on stderr and exit with `code`."""
    click.echo(f"error: {' '.join(message.split())}", err=True)
    sys.exit(code)


def flag_name(param: click.Parameter | None) -> str:
    """The name a user typed: the longest option string, or an argument's metavar."""
    if isinstance(param, click.Argument):
        return param.human_readable_name
    if param is None or not getattr(param, "opts", None):
        return "value"
    return max(param.opts, key=len)


def one_line(exc: click.ClickException) -> str:
    """A click error as one line naming the flag: `--duration: expected ...`."""
    message = " ".join(exc.format_message().split())
    if isinstance(exc, click.MissingParameter) and exc.param is not None:
        kind = "argument" if isinstance(exc.param, click.Argument) else "option"
        return f"{flag_name(exc.param)}: missing (this {kind} is required)"
    if isinstance(exc, click.BadParameter) and exc.param is not None:
        flag = flag_name(exc.param)
        message = " ".join(exc.message.split())
        if not message.startswith(flag):
            message = f"{flag}: {message}"
    return message


class OneLineGroup(click.Group):
    """A click group whose usage errors are one line naming the flag, exit status 2."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.ClickException as exc:
            fail(one_line(exc), exc.exit_code)
        except click.Abort:
            fail("aborted", EXIT_FAILED)
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)
