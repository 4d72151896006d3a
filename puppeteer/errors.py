"""The base of errors a user can fix: the CLI prints their message as one line and exits non-zero."""

from __future__ import annotations


class UserError(Exception):
    """Something in the user's input, files or environment is wrong; the message says what and where."""


class RunStopped(UserError):
    """An error that ends the whole run at once instead of being recorded as one item's failure
    (for example a strict replay that meets a call its table lacks)."""
