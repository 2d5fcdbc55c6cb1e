#!/usr/bin/env python3
"""A load-balancer backend for the end-to-end tests (tests/e2e/lb.rs): an asyncio TCP server that
says who it is and checks data both ways, so a client can tell which backend it reached, whether
its connection still works, and whether every byte arrived intact in each direction.

Usage: lb_peer.py NAME ADDRESS PORT

Per connection the server first sends `NAME\\n`, then answers requests until the client closes:
  PING\\n                  -> PONG NAME\\n
  PUT LEN CRC\\n + LEN bytes -> OK LEN CRC2\\n + LEN fresh random bytes whose CRC-32 is CRC2, when
                             the CRC-32 of the bytes received is CRC (hex); BAD GOT\\n otherwise
  SINK\\n + bytes until the client's EOF (its half-close) -> GOT LEN CRC\\n, then the server closes:
                             proves the client's shutdown arrived as EOF while the way back
                             still works
Anything else gets ERR\\n and the connection is closed.
"""

import asyncio
import os
import sys
import zlib

NAME, ADDRESS, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
# The balancer opens hundreds of connections at once in the many-clients test.
BACKLOG = 1024


async def answer(reader, writer):
    writer.write(f"{NAME}\n".encode())
    await writer.drain()
    while line := await reader.readline():
        words = line.split()
        if words == [b"PING"]:
            writer.write(f"PONG {NAME}\n".encode())
        elif words == [b"SINK"]:
            data = await reader.read()
            writer.write(f"GOT {len(data)} {zlib.crc32(data):08x}\n".encode())
            await writer.drain()
            return
        elif len(words) == 3 and words[0] == b"PUT":
            data = await reader.readexactly(int(words[1]))
            got = zlib.crc32(data)
            if got != int(words[2], 16):
                writer.write(f"BAD {got:08x}\n".encode())
                await writer.drain()
                return
            reply = os.urandom(len(data))
            writer.write(f"OK {len(reply)} {zlib.crc32(reply):08x}\n".encode() + reply)
        else:
            writer.write(b"ERR\n")
            await writer.drain()
            return
        await writer.drain()


async def serve(reader, writer):
    try:
        await answer(reader, writer)
    except (ConnectionError, asyncio.IncompleteReadError):
        # Health checks connect and close at once; closed test connections end the same way.
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(serve, ADDRESS, PORT, backlog=BACKLOG, reuse_address=True)
    print(f"{NAME} listening on {ADDRESS}:{PORT}", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
