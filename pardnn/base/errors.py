"""Errors a user can cause.

`UserError` is raised for bad input or an infeasible request: a missing or corrupt
file, a profile of another graph, an unknown preset, an impossible memory limit.
The command line turns it into one line on stderr and exit code 2; any other
exception is an internal bug (exit code 1).
"""


class UserError(Exception):
    """Bad input or an infeasible request; the message names the file or flag."""


class GraphError(UserError):
    """A cost graph that is not a valid DAG with non-negative costs."""
