"""One base class for every refusal the package raises; each message is one line, safe to show and log."""

from __future__ import annotations


class SecureOrcaError(Exception):
    """Base of every refusal: bad input, a bad file, a failed measurement. Never carries a secret."""


class UsageError(SecureOrcaError):
    """Bad input from the command line or a file it names; the CLI shows the message as one line, exit 2."""


class FlagError(SecureOrcaError, ValueError):
    """A flag value that cannot be used; the message is one line."""


class CredentialError(SecureOrcaError, ValueError):
    """A credential file that cannot be used; str() is ``--flag: problem``."""

    def __init__(self, flag: str, problem: str) -> None:
        super().__init__(f"{flag}: {problem}")
        self.flag = flag
