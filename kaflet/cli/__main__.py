"""`python -m kaflet.cli`: the same as the `kaflet` command."""

from kaflet.cli.main import main

if __name__ == "__main__":
    main()
