"""Checks file-agent with the official MCP Python SDK (2.x, the client Open WebUI uses).

Usage: target/test-python/bin/python3 tests/sdk/python_client.py http://127.0.0.1:8000/mcp
       [--client-name NAME] [--user-id ID [--openwebui-jwt-secret SECRET]] [--saved-tool]
       [--header NAME=VALUE]... [--token TOKEN] [--code CODE] [--no-list]
       [--traceparent TRACEPARENT [--tracestate TRACESTATE]]

Like Open WebUI's "auto" mode it first tries `server/discover` (protocol 2026-07-28) and falls
back to `initialize`; then it lists the tools and calls run_python. With --saved-tool it also
saves a tool with create_tool, finds it in a new tools/list as `my_add` with its input schema,
and calls it. With --user-id it sends Open WebUI's `X-OpenWebUI-User-Id` header (per-user
saved tools need a user); with --openwebui-jwt-secret as well, it sends the user as Open WebUI
0.12 does when `FORWARD_USER_INFO_HEADER_JWT_SECRET` is set: one HS256 JWT in
`X-OpenWebUI-User-Jwt`, minted with PyJWT by a copy of Open WebUI's own
`_mint_forward_user_jwt` (open_webui/utils/headers.py). With --code, run_python runs CODE instead
of `print(2 + 2)`. With --no-list it calls run_python without listing the tools first, as a
client does that opens a session per call (Open WebUI): the SDK then lists the tools after the
call's answer, to find its output schema, before it returns the result. With --token it sends `Authorization: Bearer TOKEN` (a server with
FILE_AGENT_ACCESS_TOKENS). With --traceparent (and --tracestate) the run_python call
carries that W3C trace context in its `params._meta`, as OpenTelemetry's MCP conventions
propagate it (the SDK's `meta=` argument of `call_tool`). Prints one line per step, and `link: URL` for each file link in
run_python's answer; exits non-zero on any failure. Run by the
integration test `the_official_python_sdk_lists_and_calls_the_tools`; `scripts/test-python.sh`
installs the SDK in the venv `target/test-python`; deploy/check.sh runs it against compose.
"""

import argparse
import asyncio
import re
import time

import jwt

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def mint_forward_user_jwt(user_id: str, secret: str, expires_seconds: int = 300) -> str:
    """Open WebUI 0.12's `_mint_forward_user_jwt`, for a user with this id."""
    now = int(time.time())
    payload = {
        'sub': str(user_id),
        'email': f'{user_id}@example.com',
        'name': str(user_id),
        'role': 'user',
        'iss': 'open-webui',
        'iat': now,
        'exp': now + expires_seconds,
    }
    return jwt.encode(payload, secret.strip(), algorithm='HS256')


async def main(
    url: str,
    client_name: str | None,
    user_id: str | None,
    jwt_secret: str | None,
    extra_headers: list[str],
    token: str | None,
    saved_tool: bool,
    code: str,
    list_first: bool = True,
    trace_meta: dict[str, str] | None = None,
) -> None:
    # With --client-name the session introduces itself as NAME/9.9.9 (the audit test looks for
    # it); otherwise as the SDK's default.
    client_info = types.Implementation(name=client_name, version="9.9.9") if client_name else None
    headers = dict(header.split("=", 1) for header in extra_headers)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if user_id and jwt_secret:
        headers["X-OpenWebUI-User-Jwt"] = mint_forward_user_jwt(user_id, jwt_secret)
    elif user_id:
        headers["X-OpenWebUI-User-Id"] = user_id
    async with create_mcp_http_client(headers=headers or None) as http_client, streamable_http_client(
        url, http_client=http_client
    ) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, client_info=client_info) as session:
            try:
                await asyncio.wait_for(session.discover(), timeout=10)
                print("handshake: discover", session.protocol_version)
            except Exception as error:  # Open WebUI falls back on any error
                print("handshake: initialize after discover failed:", type(error).__name__)
                await asyncio.wait_for(session.initialize(), timeout=10)
            if list_first:
                tools = await session.list_tools()
                print("tools:", ",".join(sorted(tool.name for tool in tools.tools)))
            result = await session.call_tool("run_python", {"code": code}, meta=trace_meta or None)
            text = "".join(getattr(item, "text", "") for item in result.content)
            if result.is_error:
                raise SystemExit("run_python failed: " + text)
            print("result:", text.split("```")[1].strip())
            for link in sorted(set(re.findall(r"https?://[^\s)\]>]+/files/[^\s)\]>]+", text))):
                print("link:", link)
            if saved_tool:
                await check_saved_tool(session)


ADD = "def run(a, b):\n    \"\"\"Adds two integers.\"\"\"\n    return {'sum': a + b}\n"
ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "examples": [{"a": 1, "b": 2}],
}


async def check_saved_tool(session: ClientSession) -> None:
    """create_tool, then the tool in tools/list with its schema, then a call of it."""
    created = await session.call_tool(
        "create_tool",
        {"name": "add", "description": "Adds two integers.", "code": ADD, "input_schema": ADD_SCHEMA},
    )
    if created.is_error:
        raise SystemExit("create_tool failed: " + "".join(getattr(i, "text", "") for i in created.content))
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    add = tools.get("my_add")
    if add is None:
        raise SystemExit("my_add is not listed: " + ",".join(sorted(tools)))
    print("saved tool listed:", add.name, "properties:", ",".join(sorted(add.input_schema["properties"])))
    result = await session.call_tool("my_add", {"a": 2, "b": 3})
    text = "".join(getattr(item, "text", "") for item in result.content)
    if result.is_error:
        raise SystemExit("my_add failed: " + text)
    print("saved tool result:", " ".join(text.split()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--client-name")
    parser.add_argument("--user-id")
    parser.add_argument("--openwebui-jwt-secret")
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--token")
    parser.add_argument("--saved-tool", action="store_true")
    parser.add_argument("--code", default="print(2 + 2)")
    parser.add_argument("--no-list", action="store_true")
    parser.add_argument("--traceparent")
    parser.add_argument("--tracestate")
    arguments = parser.parse_args()
    trace_meta = {
        key: value
        for key, value in (("traceparent", arguments.traceparent), ("tracestate", arguments.tracestate))
        if value
    }
    asyncio.run(
        main(
            arguments.url,
            arguments.client_name,
            arguments.user_id,
            arguments.openwebui_jwt_secret,
            arguments.header,
            arguments.token,
            arguments.saved_tool,
            arguments.code,
            not arguments.no_list,
            trace_meta,
        )
    )
