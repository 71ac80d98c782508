"""Reading descriptions and parameter docs from Google- and NumPy-style docstrings."""

from __future__ import annotations

import inspect

from tiller.tools._docstring import Docstring, parse_docstring


def clean(doc: str) -> str:
    return inspect.cleandoc(doc)


def test_nothing() -> None:
    assert parse_docstring(None) == Docstring()
    assert parse_docstring("") == Docstring()


def test_first_paragraph_only() -> None:
    doc = clean(
        """
        Find files
        by name.

        Second paragraph.
        """
    )
    assert parse_docstring(doc) == Docstring("Find files by name.", {})


def test_google_args_with_types_and_continuations() -> None:
    doc = clean(
        """
        Copy a file.

        Args:
            source (str): Where from.
            dest: Where to,
                created if missing.
            *extra: Ignored by tools, documented anyway.
            undocumented:

        Returns:
            text: Not a parameter.
        """
    )
    parsed = parse_docstring(doc)
    assert parsed.description == "Copy a file."
    assert parsed.params == {
        "source": "Where from.",
        "dest": "Where to, created if missing.",
        "extra": "Ignored by tools, documented anyway.",
    }


def test_google_section_right_after_the_summary() -> None:
    doc = clean(
        """
        Summary line.
        Arguments:
            x: The x.
        """
    )
    assert parse_docstring(doc) == Docstring("Summary line.", {"x": "The x."})


def test_numpy_parameters() -> None:
    doc = clean(
        """
        Scale a vector.

        Parameters
        ----------
        vector : list of float
            The vector.
        factor
            How much,
            as a float.

        Returns
        -------
        list of float
            Not a parameter.
        """
    )
    parsed = parse_docstring(doc)
    assert parsed.description == "Scale a vector."
    assert parsed.params == {"vector": "The vector.", "factor": "How much, as a float."}
