"""Run mongoeco's MongoDB wire-protocol server on 127.0.0.1 until killed.

Launched by the test suite under Python 3.13 (mongoeco needs it) so the tests can talk to a real
MongoDB wire server with real pymongo over TCP. Prints ``READY <port>`` on stdout once listening.

    mongo_server.py [PORT] [SQLITE_FILE]

With SQLITE_FILE the data is kept in that file (mongoeco's SQLite engine), so a server killed and started again
keeps what it acknowledged, as a mongod does (the nemesis run restarts it); without, it is kept in memory.
"""

import asyncio
import signal
import sys

from mongoeco.engines.memory import MemoryEngine
from mongoeco.engines.sqlite import SQLiteEngine
from mongoeco.wire import AsyncMongoEcoProxyServer


async def serve(port: int, path: str | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engine = SQLiteEngine(path) if path else MemoryEngine()
    async with AsyncMongoEcoProxyServer(engine=engine, host="127.0.0.1", port=port) as server:
        print(f"READY {server.address.port}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0, sys.argv[2] if len(sys.argv) > 2 else None))
