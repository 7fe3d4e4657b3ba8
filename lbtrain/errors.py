"""lbtrain's user error: what the command line reports as one line, exit code 2."""


class ConfigError(ValueError):
    """A config that cannot be used; the message is one line naming the field path and what is allowed."""
