"""Errors meant for the user: train.py prints their message, without a traceback, and exits non-zero."""


class ConfigError(ValueError):
    """Bad input found before any rank starts: the message names the problem and the fix."""
