"""Source hashed as code: docstrings and comments go, every statement and constant stays."""

from __future__ import annotations

import inspect
import textwrap

import pytest

from faultbench.core.codetext import code_text

MODULE = '''
"""The module's docstring{doc}."""

import math

LIMIT = {limit}  # a comment beside a constant{comment}


class Capped:
    """A class's docstring{doc}."""

    def __call__(self, x):
        """A method's docstring{doc}."""
        # a comment in a body{comment}
        return min(x, LIMIT){statement}


async def fetched(x):
    """An async function's docstring{doc}."""
    return x


def documented_only():
    """Nothing but a docstring{doc}."""


def undocumented():
    x = 1
    "a string on its own line after the first statement: no docstring{string}"
    return x
'''
PLAIN = {"doc": "", "comment": "", "limit": 3, "statement": "", "string": ""}


def _code(**edits: object) -> str:
    return code_text(MODULE.format(**{**PLAIN, **edits}))


@pytest.mark.parametrize(
    "edit", [{"comment": ", edited"}, {"doc": ", reworded"}], ids=["comment", "docstrings"]
)
def test_comment_and_docstring_edits_keep_the_code(edit: dict[str, str]) -> None:
    assert _code(**edit) == _code()
    assert "docstring" not in _code().replace(": no docstring", "") and "comment" not in _code()


@pytest.mark.parametrize(
    "edit",
    [{"limit": 4}, {"statement": " + 0"}, {"string": ", edited"}],
    ids=["constant", "statement", "string-statement"],
)
def test_a_changed_constant_or_statement_changes_the_code(edit: dict[str, object]) -> None:
    assert _code(**edit) != _code()


def test_the_code_still_compiles_with_empty_bodies_as_pass() -> None:
    code = _code()
    compile(code, "<code>", "exec")
    assert "def documented_only():\n    pass" in code


def test_layout_is_canonical() -> None:
    wrapped = "x = f(\n    1,\n    'a',  # why\n)\n"
    assert code_text(wrapped) == code_text('x = f(1, "a")') == "x = f(1, 'a')"


def test_an_indented_function_from_getsource_is_read_as_code() -> None:
    class Holder:
        def method(self) -> int:
            """A docstring."""
            return 1  # a comment

    source = inspect.getsource(Holder.method)
    assert source.startswith("        def")
    assert code_text(source) == "def method(self) -> int:\n    return 1"


def test_text_that_does_not_parse_alone_is_kept_as_it_is() -> None:
    fragment = textwrap.dedent("""\
        handler = register(
            transform=lambda r, s: r,
    """)
    assert code_text(fragment) == fragment
