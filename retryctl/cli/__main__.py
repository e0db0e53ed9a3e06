"""``python -m retryctl.cli``: the same as the ``retryctl`` command."""

from retryctl.cli import main

if __name__ == "__main__":
    main()
