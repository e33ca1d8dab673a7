"""The error every bad option ends in: the message names the option and what is allowed."""


class KafkaSyncOptionError(ValueError):
    """A source option is missing, unknown or has a bad value. The message names the option."""
