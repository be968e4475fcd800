"""Allow ``python -m codemods`` as an alias of the ``auxcap`` command."""

from codemods.cli.commands import main

if __name__ == "__main__":
    main()
