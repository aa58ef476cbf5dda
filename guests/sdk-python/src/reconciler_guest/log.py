"""Logging into the host's log stream, where each line is labelled with the guest, the key and
the attempt.

Like the `logging` module, a message with arguments is formatted with `%` only when there are
arguments: `log.info("created %s in %s", name, namespace)`. Each line is one host call; the
host escapes it, cuts it to 4 KiB, drops lines beyond the guest's log rate and decides which
levels it keeps. (stdout and stderr are not the log: use these.)
"""

from __future__ import annotations

from typing import Any

from . import _bindings

Level = _bindings.Level
"""`TRACE`, `DEBUG`, `INFO`, `WARN`, `ERROR`."""


def log(level: Level, message: str, *args: Any) -> None:
    """Logs `message % args` (or `message` as it is, without `args`) at `level`."""
    _bindings.host.log(level, message % args if args else message)


def trace(message: str, *args: Any) -> None:
    """Logs at trace level."""
    log(Level.TRACE, message, *args)


def debug(message: str, *args: Any) -> None:
    """Logs at debug level."""
    log(Level.DEBUG, message, *args)


def info(message: str, *args: Any) -> None:
    """Logs at info level."""
    log(Level.INFO, message, *args)


def warn(message: str, *args: Any) -> None:
    """Logs at warn level."""
    log(Level.WARN, message, *args)


def error(message: str, *args: Any) -> None:
    """Logs at error level."""
    log(Level.ERROR, message, *args)
