"""One exception type whose message is a single line naming the culprit (config key, model, operator)."""


class OpcostError(Exception):
    """A user-facing error. ``str(err)`` is one line: the culprit first, then the cause."""

    def __init__(self, culprit: str, cause: str):
        self.culprit = culprit
        self.cause = " ".join(str(cause).split())  # force one line
        super().__init__(f"{culprit}: {self.cause}")
