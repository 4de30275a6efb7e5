"""One exception type whose message is a single line naming the culprit (config key, model, operator)."""
import errno


class OpcostError(Exception):
    """A user-facing error. ``str(err)`` is one line: the culprit first, then the cause."""

    def __init__(self, culprit: str, cause: str):
        self.culprit = culprit
        self.cause = " ".join(str(cause).split())  # force one line
        super().__init__(f"{culprit}: {self.cause}")


_WRITABLE = "make it writable for this user, or write elsewhere"
_FULL = "free some space and rerun: completed measurements are kept (journal) and not measured again"
_REMEDY = {errno.ENOSPC: _FULL, errno.EDQUOT: _FULL,
           errno.EACCES: _WRITABLE, errno.EPERM: _WRITABLE, errno.EROFS: "write elsewhere (a read-only file system)",
           errno.EFBIG: "a file size limit stopped the write (ulimit -f, or the file system's): raise it or write "
                        "elsewhere"}
HOST_ERRNOS = tuple(_REMEDY)  # the host's fault (disk, permissions), never a model's


def from_os_error(e: OSError) -> OpcostError:
    """An OS error (disk full, permission denied, read-only file system...) as one line naming the path and what
    to do about it."""
    path = e.filename or "a file"
    remedy = _REMEDY.get(e.errno)
    return OpcostError(str(path), f"{e.strerror or e}" + (f": {remedy}" if remedy else ""))


class Problems(OpcostError):
    """Several problems, one line each (``str``: the lines); ``lines`` without the ``opcost:`` prefix."""

    def __init__(self, lines: list[str]):
        self.lines = list(lines)
        self.culprit, self.cause = "config", "; ".join(self.lines)
        Exception.__init__(self, "\n".join(self.lines))
