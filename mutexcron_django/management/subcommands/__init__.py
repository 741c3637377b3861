"""The subcommands of ``manage.py mutexcron``, apart from the command itself (a module under
``management/commands/`` would be a command of its own): how a subcommand is declared (``arguments``),
how they print (``output``), the store and history ones (``jobs``) and the foreground processes that
stop on a signal (``foreground``: ``run`` and ``worker``)."""
