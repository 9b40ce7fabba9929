"""Several processes serving one port (`serve --workers N`): the supervisor, the shared board, one report."""
