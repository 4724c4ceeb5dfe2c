"""CURVE key files for serve(curve=...): read as net/zsock.c and
common/common.c's lh_read_text_file read them. A key file is a regular
file of at most TEXT_FILE_MAX_BYTES: a FIFO, a device, a socket or a
folder where a key file should be is refused by name, never opened, since
opening a FIFO waits for a writer and would hang the server before it
listens. A secret key must not be readable by group or others."""
import os
import stat

TEXT_FILE_MAX_BYTES = 16 << 20  # common/common.h's LH_TEXT_FILE_MAX_BYTES
KEY_CHARS = 40                  # a Z85 key of 32 bytes
Z85 = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


class KeyFileError(Exception):
    """A key file or allow-list that cannot serve: the message names it.
    serve() reports it and exits 2, as a usage error."""


def _not_regular(path):
    return KeyFileError(f"{path}: not a regular file (a folder, a device or a pipe)")


def read_text(path):
    """The text of the regular file at path. Checked before it is opened (an
    open of a FIFO blocks), and again on what was opened, without blocking,
    in case the path was replaced in between."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise KeyFileError(f"{path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise KeyFileError(f"{path}: cannot open the file: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise _not_regular(path)
        data = f.read(TEXT_FILE_MAX_BYTES + 1)
    if len(data) > TEXT_FILE_MAX_BYTES:
        raise KeyFileError(f"{path}: longer than {TEXT_FILE_MAX_BYTES} bytes; not a config or key file")
    if b"\0" in data:
        raise KeyFileError(f"{path}: holds a NUL byte; not a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise KeyFileError(f"{path}: not UTF-8 text") from None


def _key(line):
    """A Z85 key from a line: blanks, 40 key characters, blanks; or None."""
    key = line.strip(" \t\r\n")
    return key.encode() if len(key) == KEY_CHARS and all(c in Z85 for c in key) else None


def read_key(path, secret):
    """The Z85 key on the first line of path (as `longhaul keys generate`
    writes it)."""
    if secret:
        try:
            mode = os.stat(path).st_mode
        except OSError as e:
            raise KeyFileError(f"key file {path}: {e.strerror}") from None
        if mode & 0o077:
            raise KeyFileError(f"secret key file {path} is readable by group or others (mode "
                               f"{mode & 0o777:03o}); chmod 600 it")
    text = read_text(path)
    key = _key(text.split("\n", 1)[0])
    if key is None:
        raise KeyFileError(f"key file {path}: the first line is not a 40-character Z85 key (write one with "
                           "`longhaul keys generate`)")
    return key


def read_allowed(path):
    """Allowed public keys: a file, one Z85 key a line (blank lines
    skipped), or a folder of .pub files, each such a file."""
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as e:
        raise KeyFileError(f"allowed keys {path}: {e.strerror}") from None
    files = [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith(".pub") and len(n) > 4] \
        if is_dir else [path]
    keys = set()
    for name in files:
        for number, line in enumerate(read_text(name).split("\n"), 1):
            if not line.strip(" \t\r"):
                continue
            key = _key(line)
            if key is None:
                raise KeyFileError(f"allowed keys {name}:{number}: not a 40-character Z85 public key")
            keys.add(key)
    if not keys:
        raise KeyFileError(f"allowed keys {path}: no key in it (every peer would be refused)")
    return keys
