"""The HTTP load generator of the gateway's benchmarks (benchmarks/gateway.py, benchmarks/embed.py,
benchmarks/gateway_profile.py): prebuilt request bytes posted on one keep-alive HTTP/1.1 connection per worker, as
wrk sends them, driven by bench.load's closed loop."""

from __future__ import annotations

import json

from benchmarks.peer_rows import PeerRequest
from ernie_deploy.bench.load import LoadResult, closed_loop


class _Connection:
    """One keep-alive HTTP/1.1 connection that posts prebuilt request bytes and reads the answer by its
    Content-Length: what a C load generator (wrk) does per connection, so that the client's own cost is as small
    for the HTTP rows as the asyncio gRPC client's is for the gRPC rows (an aiohttp session was measured to add about
    1 ms a request on this machine)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def post(self, request: bytes) -> tuple[int, bytes]:
        import asyncio

        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await self.reader.readexactly(length)
        if b"connection: close" in head.lower():
            self.writer.close()
            self.reader = self.writer = None
        return status, body


def _request_bytes(url: str, body: bytes) -> tuple[str, int, bytes]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    head = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return parts.hostname, parts.port, head.encode("ascii") + body


def run_http_load(url: str, requests: list[PeerRequest], concurrency: int, check, **kw) -> LoadResult:
    """`requests` (their JSON bodies) posted to `url` back to back by `concurrency` workers (bench.load.closed_loop),
    each on its own keep-alive connection; `check(answer, request)` says what is wrong with a 200 answer, or None."""
    import asyncio

    host, port, _ = _request_bytes(url, b"")
    prepared = [_Prepared(_request_bytes(url, r.body)[2], r.size) for r in requests]
    return asyncio.run(_drive(host, port, prepared, concurrency, check, kw))


class _Prepared:
    """A request's bytes on the wire, and the texts in it."""

    def __init__(self, raw: bytes, size: int):
        self.raw, self.size = raw, size


async def _drive(host: str, port: int, requests: list, concurrency: int, check, kw: dict) -> LoadResult:
    import asyncio

    free = [_Connection(host, port) for _ in range(concurrency)]

    async def send(request: _Prepared) -> str | None:
        connection = free.pop()
        try:
            status, payload = await connection.post(request.raw)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            connection.reader = connection.writer = None
            return f"{type(exc).__name__}: {exc}"
        finally:
            free.append(connection)
        if status != 200:
            return f"HTTP {status}: {payload[:160].decode(errors='replace')}"
        return check(json.loads(payload), request)

    result = await closed_loop(
        send,
        requests,
        concurrency,
        kw.get("warmup_s", 1.0),
        kw.get("duration_s", 10.0),
        kw.get("count"),
        kw.get("server_pgid"),
    )
    for connection in free:
        if connection.writer is not None:
            connection.writer.close()
    return result
