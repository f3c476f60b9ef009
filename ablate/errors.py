"""Errors that carry a one-line message for the user (the CLI exits 2 on them)."""


class ConfigError(ValueError):
    """A bad study, key, value or path: the message says what is valid or what is missing."""


def choice_error(what: str, value, choices) -> ConfigError:
    """`ConfigError` for a value outside a fixed set, naming the valid choices."""
    valid = ", ".join(str(c) for c in choices)
    return ConfigError(f"unknown {what} {value!r}; valid choices: {valid}")


class NaNLoss(RuntimeError):
    """Training produced a non-finite loss (the seed is recorded with status 'nan')."""


class DeviceError(RuntimeError):
    """The config asks for a device this process cannot use."""


class DeviceMemoryExhausted(RuntimeError):
    """Device memory ran out for the smallest piece of work (one member's training, the
    smallest evaluation chunk): the same trial on the same device would fail the same way,
    so the worker does not retry it. The message names the remedy."""
