"""The Redis plumbing every Redis-backed piece (lock store, task backend, task records) is built on: URLs to clients
(:mod:`.urls`: one server, a cluster, Sentinel), the shared client and key helpers (:mod:`.client`), and Lua scripts
on a cluster as on one server (:mod:`.cluster`). redis-py is imported by the modules, not here, so importing the
package costs nothing; ``import redis`` inside it is the driver (imports are absolute)."""
