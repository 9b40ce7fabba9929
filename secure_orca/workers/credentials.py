"""One trust in force across ``serve --workers N``: one credential reader, the material it accepted shared.

The credential reader is a process of the supervisor's (forked before the workers, restarted like one). It is
the only process that reads the credential files: every ``--credential-reload-interval`` it runs the reloader
of a single process (``server.reload``: each source read off its loop with a timeout, parsed, checked whole,
a refusal logged once with the last good content kept, the reload counted in its /metrics family) and, when it
accepted something, publishes every live source's bytes as read (file bytes with the identity and mode they
were read with, never a pickled object) and a generation number into a shared region (``board.Region``: a
seqlock and a CRC-32). The region is sized from the credential size limit (``MAX_CREDENTIAL_BYTES`` per file
of every live source); material that would not fit is refused like a bad file, before the reader installs
it, so the reader and the workers never part.

Each worker's reloader reads that region instead of the files (``Subscriber``): ten times per interval it
checks the region's sequence number (one integer read on the loop) and, when it changed, takes the new bytes
and installs what differs through the same path as a local reload (the same parser per kind, the same
cross-file check, the same swap of Authority, client trust, serving pair and handshake trust, the same wake-up
of open out-of-band streams). A worker forked later (a restart) installs the current generation before it
serves. So a change is in force in every worker within one reader poll and a tenth of an interval.

The serving certificate and key go through the region too: no worker opens a credential file.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import signal
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from secure_orca.credentials.files import MAX_CREDENTIAL_BYTES, FileContent
from secure_orca.credentials.loader import Source
from secure_orca.errors import CredentialError
from secure_orca.server.assembly import Server
from secure_orca.server.reload import Reading, Reloader, Watched
from secure_orca.workers.board import Region

if TYPE_CHECKING:  # prometheus-client is imported with a /metrics only: a tenth of serve's start-up
    from prometheus_client import CollectorRegistry

log = logging.getLogger("secure_orca.workers")
EXPOSITION_MAX = 16 * 1024  # bytes of the reader's /metrics family (the reloads, by flag and result)
RELOAD_FAMILY = "secure_orca_credential_reloads"
_SNAPSHOT = struct.Struct("<QI")  # generation, sources
_SOURCE = struct.Struct("<HB")  # flag length, files
_FILE = struct.Struct("<HQQIII")  # path length, device, inode, mode, owner, data length


def encode(generation: int, sources: Sequence[tuple[str, list[FileContent]]]) -> bytes:
    """The accepted bytes of every source, with the identity and mode each file was read with."""
    out = [_SNAPSHOT.pack(generation, len(sources))]
    for flag, contents in sources:
        name = flag.encode()
        out += [_SOURCE.pack(len(name), len(contents)), name]
        for c in contents:
            path = os.fsencode(c.path)
            out += [_FILE.pack(len(path), c.device, c.inode, c.mode, c.owner, len(c.data)), path, c.data]
    return b"".join(out)


def decode(value: bytes) -> tuple[int, dict[str, list[FileContent]]]:
    """``encode``'s generation and sources (the region's CRC has vouched for the bytes)."""
    generation, count = _SNAPSHOT.unpack_from(value)
    at = _SNAPSHOT.size
    found: dict[str, list[FileContent]] = {}
    for _ in range(count):
        length, files = _SOURCE.unpack_from(value, at)
        at += _SOURCE.size
        flag = value[at : at + length].decode()
        at += length
        contents = []
        for _ in range(files):
            path_length, device, inode, mode, owner, size = _FILE.unpack_from(value, at)
            at += _FILE.size
            path = Path(os.fsdecode(value[at : at + path_length]))
            at += path_length
            contents.append(FileContent(path, value[at : at + size], device, inode, mode, owner))
            at += size
        found[flag] = contents
    return generation, found


def capacity(sources: Sequence[Source]) -> int:
    """The largest snapshot of ``sources``: every file at the credential size limit."""
    size = _SNAPSHOT.size
    for source in sources:
        size += _SOURCE.size + len(source.flag.encode())
        size += sum(_FILE.size + len(os.fsencode(path)) + MAX_CREDENTIAL_BYTES for path in source.paths)
    return size


class SharedCredentials:
    """The shared mapping (made before any fork): the accepted material, and the reader's /metrics family."""

    def __init__(self, material_capacity: int) -> None:
        material = Region.size(material_capacity)
        self.memory = mmap.mmap(-1, material + Region.size(EXPOSITION_MAX))  # pages are touched only when written
        self.material = Region(self.memory, 0, material_capacity)
        self.exposition = Region(self.memory, material, EXPOSITION_MAX)

    def read(self) -> tuple[int, int, dict[str, list[FileContent]]] | None:
        """The region's sequence number, the generation and its sources; None before the first or when torn."""
        got = self.material.read()
        if got is None:
            return None
        return got[0], *decode(got[1])


def in_force(watched: Sequence[Watched]) -> list[tuple[str, list[FileContent]]]:
    return [(w.source.flag, w.contents) for w in watched if w.contents is not None]


class Publisher(Reading):
    """The reader's reading: the files, and what it accepted published for the workers."""

    def __init__(
        self,
        shared: SharedCredentials,
        reloader: Reloader,
        generation: int = 0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.shared, self.reloader, self.generation = shared, reloader, generation
        names = [f"{RELOAD_FAMILY}_total", f"{RELOAD_FAMILY}_created"]
        self.registry = registry.restricted_registry(names) if registry is not None else None
        shared.material.resume()
        shared.exposition.resume()
        self.stale = shared.read() is None  # nothing readable there yet (the first reader, or a torn region)

    def admit(self, watched: Watched, contents: list[FileContent]) -> None:
        others = [(w.source.flag, w.contents) for w in self.reloader.watched if w is not watched and w.contents]
        size = len(encode(0, [*others, (watched.source.flag, contents)]))
        if size > self.shared.material.capacity:
            raise CredentialError(
                watched.source.flag,
                f"the credential material would be {size} bytes, more than the {self.shared.material.capacity} "
                "shared with the workers",
            )

    def applied(self, watched: Sequence[Watched], reloaded: list[str]) -> None:
        if reloaded or self.stale:
            self.publish(watched)
        if self.registry is not None:
            from prometheus_client import generate_latest

            self.shared.exposition.publish(generate_latest(self.registry))

    def publish(self, watched: Sequence[Watched]) -> None:
        self.generation += 1
        try:
            self.shared.material.publish(encode(self.generation, in_force(watched)))
        except ValueError as error:  # admit keeps this from happening; said, never raised into the loop
            log.error("the credential material was not shared with the workers: %s", error)
            return
        self.stale = False
        log.info("credential generation %d shared with the workers", self.generation)


class Subscriber(Reading):
    """A worker's reading: the material the reader published, taken when its generation changes."""

    CHECKS_PER_POLL = 10
    RELOADED_LEVEL = logging.DEBUG  # the reader says it, once for the server

    def __init__(self, shared: SharedCredentials) -> None:
        self.shared = shared
        self.sequence = 0
        self.generation = 0
        self.sources: dict[str, list[FileContent]] = {}

    def changed(self) -> bool:
        return self.shared.material.sequence() != self.sequence

    def begin(self) -> None:
        got = self.shared.read()
        if got is not None:  # None: nothing yet, or torn (its writer died mid-write): the last one stays
            self.sequence, self.generation, self.sources = got

    def read(self, source: Source) -> list[FileContent]:
        contents = self.sources.get(source.flag)
        if contents is None:
            raise CredentialError(source.flag, "not shared by the credential reader")
        return contents


def follow(server: Server, shared: SharedCredentials) -> Subscriber:
    """Make a worker's reloader read the shared material, and install the current generation now (before it
    serves). Its reloads are the reader's in /metrics, so the worker only wakes its out-of-band streams."""
    reloader = server.reloader
    subscriber = Subscriber(shared)
    reloader.read_through(subscriber, server.oob.reloaded if server.oob is not None else None)
    reloader.check()
    return subscriber


def read_forever(server: Server, shared: SharedCredentials) -> int:
    """The credential reader's process: catch up with the generation in force (a restarted reader), then poll
    the files as a single process does and publish what it accepts, until SIGTERM."""
    reloader = server.reloader
    counted = reloader.on_reload
    catching_up = Subscriber(shared)
    reloader.read_through(catching_up, None)
    reloader.check()
    registry = server.metrics.registry if server.metrics is not None else None
    reloader.read_through(Publisher(shared, reloader, catching_up.generation, registry), counted)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        reloading = asyncio.create_task(reloader.run(server.config.serving.reload_interval))
        await stop.wait()
        reloading.cancel()

    asyncio.run(main())
    return 0


class CredentialReader:
    """The supervisor's side: the shared mapping, the first generation, and what the reader process runs."""

    def __init__(self, server: Server) -> None:
        reloader = server.reloader
        self.server = server
        self.shared = SharedCredentials(capacity([w.source for w in reloader.watched]))
        self.shared.material.publish(encode(1, in_force(reloader.watched)))  # what every process starts from

    def serve(self) -> int:
        """In the reader process: read the credential files and publish what the reloader accepts."""
        return read_forever(self.server, self.shared)

    def follow(self) -> None:
        """In a worker, after the fork: read the shared material, never the files."""
        follow(self.server, self.shared)
