"""The manager's listening socket: connections asyncio accepts on it get TCP_NODELAY, so a
response written as headers then body is not held back by Nagle until the client's delayed ACK."""

from __future__ import annotations

import asyncio
import socket

from kaflet.manager.command import listening_socket


def test_accepted_connections_have_tcp_nodelay() -> None:
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]

    async def run() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                return await asyncio.wait_for(accepted, 10)
            finally:
                writer.close()
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(run()) != 0
