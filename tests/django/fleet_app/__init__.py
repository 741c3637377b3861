"""The fleet test site's app: one every-second job whose body appends to its process's own ledger."""
