"""The one base class for problems with the user's input.

Raised anywhere in stepmark with a message that names the file and the problem; the command line prints it
as one line (no traceback) and exits with status 2.
"""

from __future__ import annotations


class StepmarkError(Exception):
    """Bad input or a refused operation, explained in the message."""
