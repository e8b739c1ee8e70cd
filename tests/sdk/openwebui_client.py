"""Calls one tool of file-agent exactly as a chat in Open WebUI 0.12.4 does: with Open WebUI's
own MCP client (`open_webui.utils.mcp.client.MCPClient`: httpx2 with its fixed
`Timeout(30, read=300)`, the MCP SDK's `Client` in its default `auto` mode, which speaks the
2026-07-28 protocol to a server that offers it), `connect(url, headers=...)` with the headers
Open WebUI builds for the connection, then `call_tool(name, args)`.

Prints one JSON line when the call ends: `{"event": "result", "seconds": .., "content": [..]}`,
`{"event": "error", "seconds": .., "error": ".."}` (what Open WebUI would show), or
`{"event": "gave-up", "seconds": ..}` when `--give-up-after` ran out first (a user who closed
the tab, a proxy that gave up: the client closes the call's stream).

Run with the venv of scripts/test-openwebui.sh; Open WebUI's settings come from the
environment as Open WebUI reads them (AIOHTTP_CLIENT_TIMEOUT_TOOL_SERVER, ...).
`--read-timeout` replaces the client's 300 s read timeout, for a quick test of the same thing.
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

# open_webui.env writes under DATA_DIR at import and stops without a secret key; the client
# uses neither.
os.environ.setdefault("DATA_DIR", tempfile.mkdtemp(prefix="owui-data-"))
os.environ.setdefault("WEBUI_SECRET_KEY", "unused-by-the-mcp-client")

import httpx2  # noqa: E402
import open_webui.utils.mcp.client as owui_client  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--header", action="append", default=[], help="NAME=VALUE, repeated")
    parser.add_argument("--tool", required=True)
    parser.add_argument("--args", default="{}", help="the tool's arguments, as JSON")
    parser.add_argument("--give-up-after", type=float, help="seconds, then the client leaves")
    parser.add_argument("--read-timeout", type=float, help="seconds, instead of Open WebUI's 300")
    options = parser.parse_args()
    headers = dict(header.split("=", 1) for header in options.header)
    if options.read_timeout is not None:
        read = options.read_timeout

        def create_httpx_client(headers=None, auth=None):
            return httpx2.AsyncClient(
                headers=headers,
                auth=auth,
                verify=owui_client.AIOHTTP_CLIENT_SESSION_TOOL_SERVER_SSL,
                timeout=httpx2.Timeout(30, read=read),
            )

        owui_client.create_httpx_client = create_httpx_client
    started = time.monotonic()
    try:
        return asyncio.run(call(options, headers))
    except BaseException as error:  # the SDK's task group may end the whole run
        end = {"event": "error", "error": f"{type(error).__name__}: {error}"}
        end["seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(end), flush=True)
        return 0


async def call(options, headers) -> int:
    client = owui_client.MCPClient()
    await client.connect(options.url, headers=headers or None)
    print(json.dumps({"event": "connected"}), flush=True)
    started = time.monotonic()
    arguments = json.loads(options.args)
    try:
        call = client.call_tool(options.tool, arguments)
        if options.give_up_after is not None:
            content = await asyncio.wait_for(call, options.give_up_after)
        else:
            content = await call
        line = {"event": "result", "content": content}
    except asyncio.TimeoutError:
        line = {"event": "gave-up"}
    except BaseException as error:  # what Open WebUI turns into the tool's error
        line = {"event": "error", "error": f"{type(error).__name__}: {error}"}
    line["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(line), flush=True)
    try:
        await client.disconnect()
    except BaseException:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
