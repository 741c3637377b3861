"""The fleet test site served by the standard library's wsgiref, a server that AUTOSTART does not know
(tests/django/test_autostart_asgi_uwsgi.py): ``python tests/django/wsgiref_server.py PORT``."""

from __future__ import annotations

import sys
from wsgiref.simple_server import make_server

from tests.django.fleet_wsgi import application

if __name__ == "__main__":
    with make_server("127.0.0.1", int(sys.argv[1]), application) as server:
        print("wsgiref serving", flush=True)
        server.serve_forever()
