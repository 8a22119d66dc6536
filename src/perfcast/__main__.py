"""``python -m perfcast``: the same as the ``perfcast`` script."""

from perfcast.cli import main

__all__: list[str] = []

main()
