"""A worker's side of accepting in turn (``server.http.accept``): its connection count on the board, and its
live siblings' counts read from there. The supervisor clears a dead worker's slot when it reaps it, so a dead
sibling stops counting at once."""

from __future__ import annotations

import os

from secure_orca.workers.board import Board


class BoardBalance:
    """``server.http.accept.Balance`` over the shared board, for worker ``index``."""

    def __init__(self, board: Board, index: int) -> None:
        self.board, self.index, self.pid = board, index, os.getpid()

    def publish(self, held: int) -> None:
        self.board.write_held(self.index, self.pid, held)

    def siblings(self) -> list[int]:
        counts = []
        for index in range(self.board.workers):
            if index != self.index:
                pid, held = self.board.held(index)
                if pid:
                    counts.append(held)
        return counts
