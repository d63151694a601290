"""Text files read as UTF-8; one that is not is a LayerlawsError naming the file, the
first byte that is not UTF-8 (its offset and line) and what to do."""

from __future__ import annotations

from pathlib import Path

from layerlaws.core.errors import LayerlawsError


def utf8_text(path: Path, what: str = "text file") -> str:
    """The content of ``path``, ``what`` the file is to the user (``probing text file``,
    ``config file``)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise LayerlawsError(
            f"{what} {path} is not valid UTF-8: byte {error.start} (line {line}) is "
            f"0x{data[error.start]:02x} ({error.reason}); save it as UTF-8 (e.g. with "
            f"`iconv -f <its encoding> -t utf-8`)"
        ) from None
