"""The one exception type that means "the user asked for something invalid".

The CLI turns it into a single line on stderr and exit status 2; anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class FaultbenchError(ValueError):
    """Invalid input: an unknown name, an out-of-range value, malformed data."""


def unknown_name(kind: str, name: str, valid: Iterable[str]) -> FaultbenchError:
    """Build the error for a name that is not registered, with the nearest valid one."""
    valid = sorted(valid)
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return FaultbenchError(f"Unknown {kind} '{name}'.{hint} Valid: {', '.join(valid)}")
