"""Why a line is left for a person: one of a short, fixed list, named on every report line.

After `--write`, whatever `--check` still reports is there for one of these reasons, so a user
(and a test over a corpus of real files) can tell "the tool could not know" from "the tool
missed it". The dialects and the token scan say what they found in their own words; `reason`
files each message under one entry of REASONS, by the phrases those modules use.
"""

from __future__ import annotations

import re

#: the reasons, in the words the report prints them
REASONS: dict[str, str] = {
    "runtime": "a value known only at run time",
    "no-equivalent": "a flag with no equivalent",
    "fork": "a fork's flag",
    "ambiguous": "the command does not say which new flag",
    "source": "inside program source",
    "unplaced": "not in a command the rewrite reads",
}

#: (reason, what the message says), first match wins
_PHRASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fork", re.compile(r"written for a fork|a fork's")),
    ("runtime", re.compile(r"shell variable|decided when the command runs|may set|may come from"
                           r"|is set in this file|cannot compare|unless .* already sets")),
    ("no-equivalent", re.compile(r"no --speculative-config equivalent|has no equivalent|no "
                                 r"effect any more|not a key current vLLM|no one-to-one|not an "
                                 r"integer|has no value|by hand \(this line's form")),
    ("ambiguous", re.compile(r"cannot be told|several ngram types|no ngram type|names no draft"
                             r"|merge them by hand|ngram type it configured")),
    ("source", re.compile(r"inside program source")),
)


def reason(message: str) -> str:
    """The REASONS key a report message falls under ("unplaced" when none says more)."""
    return next((key for key, pattern in _PHRASES if pattern.search(message)), "unplaced")


def tagged(message: str) -> str:
    """The message with its reason, as a report line ends: `... [a fork's flag]`."""
    return f"{message} [{REASONS[reason(message)]}]"
