"""The ``rlmm`` command line: ``main`` (the commands, ``rlmm.cli.main``) and what the commands of other
packages share with it (``errors``: exit codes and one-line errors; ``settings``: the flags ``serve`` and
``consume`` share; ``vocabulary``: Kafka's spellings of flags). Nothing is imported here, so that a command of
``rlmm.server`` or ``snapshots`` can use the shared modules without loading every command."""
