"""Reading one credential file: a regular file only, bounded in size, its identity taken from the open file."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from secure_orca.errors import CredentialError

MAX_CREDENTIAL_BYTES = 1 << 20  # far above any certificate bundle or secret list; bounds a reload's memory


@dataclass(frozen=True)
class FileContent:
    """A credential file's bytes and the identity and mode of the very file they were read from."""

    path: Path
    data: bytes
    device: int
    inode: int
    mode: int
    owner: int

    @property
    def fingerprint(self) -> tuple[int, int, int, int, bytes]:
        """What a reload compares: identity, mode, owner and content."""
        return (self.device, self.inode, self.mode, self.owner, hashlib.sha256(self.data).digest())

    def private(self, flag: str) -> bytes:
        """The bytes, refusing a file that other users can read (mode of the file read)."""
        if self.mode & stat.S_IROTH:
            raise CredentialError(flag, f"{self.path}: is world-readable (mode {self.mode:04o}); chmod o-r it")
        return self.data


def read_credential(path: Path, flag: str) -> FileContent:
    """Read a regular file of at most MAX_CREDENTIAL_BYTES. A FIFO, device or socket is refused without
    reading (opened non-blocking, checked with fstat on the open descriptor), so it cannot stall the reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise CredentialError(flag, f"{path}: no such file") from None
    except OSError as error:
        raise CredentialError(flag, f"{path}: cannot read ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise CredentialError(flag, f"{path}: is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise CredentialError(flag, f"{path}: is not a regular file")
        if info.st_size > MAX_CREDENTIAL_BYTES:
            raise CredentialError(flag, f"{path}: larger than {MAX_CREDENTIAL_BYTES} bytes")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_CREDENTIAL_BYTES:
                raise CredentialError(flag, f"{path}: larger than {MAX_CREDENTIAL_BYTES} bytes")
    except OSError as error:
        raise CredentialError(flag, f"{path}: cannot read ({error.strerror})") from None
    finally:
        os.close(fd)
    return FileContent(path, b"".join(chunks), info.st_dev, info.st_ino, stat.S_IMODE(info.st_mode), info.st_uid)
