"""Delayed tasks in SQL: :mod:`.backend` the task backend (``TaskQueue("django://")``), split into :mod:`.claims`,
:mod:`.consumer`, :mod:`.wakeups` and :mod:`.local_wake`; :mod:`.records` the task records of the RabbitMQ backend
(``cancel_store="django://"``). How it works: ``docs/sql-tasks.md``."""
