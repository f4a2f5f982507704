"""``python -m convgit``: the same as the ``convgit`` command."""

from .cli.entry import main

main()
