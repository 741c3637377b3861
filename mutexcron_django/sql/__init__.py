"""The app's SQL database as a backend (``django://[alias]``): :mod:`.store` the lock store (:mod:`.states` its rows
read back, :mod:`.overlap` the overlap policies' slot and stop request), :mod:`.databases`
what the SQL backends share (URLs, the alias check, database errors), :mod:`.clock` the database's clock in UTC,
and :mod:`.tasks` the SQL task backend and task records.
Nothing is imported here, so that reading a URL loads no model."""
