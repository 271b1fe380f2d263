"""Finding markers in text that arrives piece by piece (the parsers of calls and reasoning)."""


def partial_marker(s: str, marker: str) -> int:
    """How many of s's last characters may start `marker` (held back until the next piece)."""
    for n in range(min(len(marker) - 1, len(s)), 0, -1):
        if marker.startswith(s[-n:]):
            return n
    return 0
