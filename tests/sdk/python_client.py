"""Checks file-agent with the official MCP Python SDK (2.x, the client Open WebUI uses).

Usage: python3 tests/sdk/python_client.py http://127.0.0.1:8000/mcp [--client-name NAME]

Like Open WebUI's "auto" mode it first tries `server/discover` (protocol 2026-07-28) and falls
back to `initialize`; then it lists the tools and calls run_python. Prints one line per step;
exits non-zero on any failure. Run by the integration test
`the_official_python_sdk_lists_and_calls_the_tools`; `scripts/bootstrap.sh` installs the SDK.
"""

import argparse
import asyncio

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, client_name: str | None) -> None:
    # With --client-name the session introduces itself as NAME/9.9.9 (the audit test looks for
    # it); otherwise as the SDK's default.
    client_info = types.Implementation(name=client_name, version="9.9.9") if client_name else None
    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, client_info=client_info) as session:
            try:
                await asyncio.wait_for(session.discover(), timeout=10)
                print("handshake: discover", session.protocol_version)
            except Exception as error:  # Open WebUI falls back on any error
                print("handshake: initialize after discover failed:", type(error).__name__)
                await asyncio.wait_for(session.initialize(), timeout=10)
            tools = await session.list_tools()
            print("tools:", ",".join(sorted(tool.name for tool in tools.tools)))
            result = await session.call_tool("run_python", {"code": "print(2 + 2)"})
            text = "".join(getattr(item, "text", "") for item in result.content)
            if result.is_error:
                raise SystemExit("run_python failed: " + text)
            print("result:", text.split("```")[1].strip())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--client-name")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.url, arguments.client_name))
