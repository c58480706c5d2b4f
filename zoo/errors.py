"""Errors the CLI turns into one line and an exit code (DESIGN.md: 0 done, 1 criterion not met,
2 bad input)."""


class ZooError(Exception):
    """Bad input or an impossible request: `zoo: error: <message>`, exit 2."""

    exit_code = 2


class CriterionNotMet(Exception):
    """The job ran but did not meet its criterion: results are written, exit 1."""

    exit_code = 1
