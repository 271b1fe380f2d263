"""How many HTTP connections `specgguf serve` keeps open at once (--max-connections).

Every request running in a slot (-np) or waiting for one (--max-queue) holds a connection, so
the bound is never below their sum; past it a new connection is answered 503 and closed (the
server's runner does that). Kept apart from the runner so that the command line can check
and describe the flag without loading the server.
"""

from __future__ import annotations

#: connections allowed beyond what the requests themselves hold: room for streaming clients'
#: connection pools, /health probes and keep-alive connections between requests
CONNECTION_HEADROOM = 1024
#: the most --max-connections may be: each open connection holds a file descriptor
MAX_CONNECTIONS = 65536


def needed_connections(n_parallel: int, max_queue: int) -> int:
    """The connections the requests themselves may hold: -np running, --max-queue waiting."""
    return n_parallel + max_queue


def default_max_connections(n_parallel: int, max_queue: int) -> int:
    """--max-connections when it is not given."""
    return needed_connections(n_parallel, max_queue) + CONNECTION_HEADROOM
