"""``python -m rlmm.cli``: the ``rlmm`` command."""

from rlmm.cli.main import main

if __name__ == "__main__":
    main()
