"""Errors that carry a one-line message for the user (the CLI exits 2 on them)."""

from __future__ import annotations

from collections.abc import Collection, Iterable


class ConfigError(ValueError):
    """A bad study, key, value or path: the message says what is valid or what is missing."""


def did_you_mean(word: object, choices: Iterable[object], prefix: str = "") -> str:
    """``"; did you mean 'x'?"`` for the choice closest to a misspelt `word` (difflib), else
    an empty string: appended to a one-line error naming the valid choices. `prefix` is put
    before the suggestion (``data.`` for a dataset parameter)."""
    import difflib

    names = [str(c) for c in choices]
    text = str(word)
    close = difflib.get_close_matches(text, names, n=1, cutoff=0.6)
    if not close:  # a case slip ('GIN'), a short prefix ('super') or a long form
        low = text.lower()  # ('unsupervised' for unsup) is a miss for difflib
        close = [n for n in names if n.lower() == low]
        for near in ([n for n in names if n.lower().startswith(low)],
                     [n for n in names if low.startswith(n.lower())]):
            if not close and len(text) >= 3 and len(near) == 1 and len(near[0]) >= 3:
                close = near
    return f"; did you mean {prefix + close[0]!r}?" if close else ""


def choice_error(what: str, value: object, choices: Collection[object]) -> ConfigError:
    """`ConfigError` for a value outside a fixed set, naming the valid choices (and the closest
    one to a misspelt value)."""
    valid = ", ".join(str(c) for c in choices)
    return ConfigError(f"unknown {what} {value!r}; valid choices: {valid}"
                       f"{did_you_mean(value, choices)}")


class NaNLoss(RuntimeError):
    """Training produced a non-finite loss (the seed is recorded with status 'nan')."""


class DeviceError(RuntimeError):
    """The config asks for a device this process cannot use."""


class DeviceMemoryExhausted(RuntimeError):
    """Device memory ran out for the smallest piece of work (one member's training, the
    smallest evaluation chunk): the same trial on the same device would fail the same way,
    so the worker does not retry it. The message names the remedy."""


# Errors a retry cannot fix: a bad config, value or path, a missing device, a bug.
DETERMINISTIC = (ValueError, TypeError, KeyError, AttributeError, ImportError,
                 NotImplementedError, AssertionError)


def retryable(e: BaseException) -> bool:
    """Whether a trial's error may pass on a retry: worker deaths, out-of-memory and other
    runtime faults may; config errors (`ConfigError`, a `ValueError`) never, nor a device
    this process cannot use, nor device memory that ran out for the smallest piece of work
    (it would repeat). The one rule of every retry of a trial: a grid trial's in its worker
    (`ablate.runner.execute.worker`), a search study's final evaluation
    (`ablate.runner.search.final`)."""
    return not isinstance(e, DETERMINISTIC + (DeviceError, DeviceMemoryExhausted))
