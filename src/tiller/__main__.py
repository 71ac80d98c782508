"""`python -m tiller` is the `tiller` command."""

from tiller.cli import main

main()
