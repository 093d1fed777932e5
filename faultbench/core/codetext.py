"""Source text as the code it runs: what a cache key hashes.

A run key (and a stored answer's key) hashes the source of the code behind it, so
that an edit retrains (or re-diagnoses) what it affects. Hashing the text itself
made a reworded docstring or comment retrain every run: a key hashes
:func:`code_text` instead, which keeps every statement and constant and drops what
no run executes.
"""

from __future__ import annotations

import ast
import textwrap

_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def code_text(source: str) -> str:
    """``source`` without its docstrings and comments, in one canonical layout.

    The text is parsed and written back (:func:`ast.unparse`): comments, blank lines,
    line breaks and quoting go, and so does the docstring of the module and of every
    class and function in it (a body left empty becomes ``pass``). Every statement,
    name and constant stays, so any change to what the code does changes the result.
    Code that reads its own ``__doc__`` would not be keyed by it (nothing hashed
    does). The layout is ``ast.unparse``'s, which may differ between Python minor
    versions (the project pins one: Makefile's ``PY``).

    Args:
        source: Python source: a module, or one function or class cut from one
            (indented as in its file, as :func:`inspect.getsource` gives it).

    Returns:
        The normalized code; ``source`` itself when it does not parse on its own
        (a lambda cut out of the middle of an expression).
    """
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        if isinstance(node, _DOCUMENTED) and node.body and _is_docstring(node.body[0]):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def _is_docstring(statement: ast.stmt) -> bool:
    """Whether ``statement``, the first of a body, is a string on its own: its docstring."""
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )
