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
environment as Open WebUI reads them (AIOHTTP_CLIENT_TIMEOUT_TOOL_SERVER,
ENABLE_FORWARD_USER_INFO_HEADERS, FORWARD_USER_INFO_HEADER_JWT_SECRET, ...).
`--read-timeout` replaces the client's 300 s read timeout, for a quick test of the same thing.

The headers: with `--connection` (the connection as Open WebUI stores it: `auth_type`, `key`,
`headers`), `--user`, `--session-token`, `--chat-id` and `--message-id`, they are what Open
WebUI's own `build_tool_server_headers` (open_webui/utils/tools.py, which `connect_mcp_server`
calls before every tool call of a chat) makes for that user, chat and message: the bearer of
the connection's auth, its custom headers, and with ENABLE_FORWARD_USER_INFO_HEADERS the user
(`include_user_info_headers`: one signed token with FORWARD_USER_INFO_HEADER_JWT_SECRET, else
the plain X-OpenWebUI-User-* headers) and X-OpenWebUI-Chat-Id and X-OpenWebUI-Message-Id.
`--header NAME=VALUE` adds (or replaces) one by hand.
"""

import argparse
import asyncio
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
import time
import types

# open_webui.env writes under DATA_DIR at import and stops without a secret key; the client
# uses neither.
os.environ.setdefault("DATA_DIR", tempfile.mkdtemp(prefix="owui-data-"))
os.environ.setdefault("WEBUI_SECRET_KEY", "unused-by-the-mcp-client")

import httpx2  # noqa: E402
import open_webui.utils.mcp.client as owui_client  # noqa: E402

# What open_webui/utils/tools.py imports beyond the MCP client: the application's database
# models and configuration, its built-in tools, FastAPI, LangChain (the whole application is
# about 7 GB). None of it is on the path from `build_tool_server_headers` to the headers of an
# MCP connection with auth "bearer", "session" or "none" and no {{USER_GROUPS}} in its custom
# headers; each stands in as a module whose every name fails if it is ever called.
STAND_INS = (
    "fastapi",
    "yaml",
    "langchain_core",
    "open_webui.config",
    "open_webui.models",
    "open_webui.tools",
    "open_webui.utils.access_control",
    "open_webui.utils.misc",
    "open_webui.utils.oauth",
    "open_webui.utils.plugin",
    "open_webui.utils.terminals",
    "open_webui.utils.voice_avatar",
)


class NotInstalled:
    """A name of a module that stands in: calling it fails, saying so."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name} is not in the test venv (scripts/test-openwebui.sh)")

    def __getattr__(self, attribute):
        return NotInstalled(f"{self.name}.{attribute}")


class StandInLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attribute: NotInstalled(f"{spec.name}.{attribute}")
        return module

    def exec_module(self, module):
        pass


class StandInFinder(importlib.abc.MetaPathFinder):
    """Makes each of STAND_INS a stand-in: Open WebUI's own modules always (their imports
    need the database), the libraries only when they are not installed."""

    def find_spec(self, name, path, target=None):
        if not any(name == p or name.startswith(p + ".") for p in STAND_INS):
            return None
        if not name.startswith("open_webui.") and self.installed(name):
            return None
        return importlib.machinery.ModuleSpec(name, StandInLoader(), is_package=True)

    def installed(self, name):
        sys.meta_path.remove(self)
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False
        finally:
            sys.meta_path.insert(0, self)


def tool_server_headers(options):
    """The headers Open WebUI's own `build_tool_server_headers` makes for a tool call of
    `options.chat_id`'s message `options.message_id` by `options.user`."""
    sys.meta_path.insert(0, StandInFinder())
    from open_webui.utils.tools import build_tool_server_headers

    user = types.SimpleNamespace(**json.loads(options.user)) if options.user else None
    # The chat request as Open WebUI's auth left it: the user's own token (auth "session").
    token = types.SimpleNamespace(credentials=options.session_token)
    request = types.SimpleNamespace(state=types.SimpleNamespace(token=token), cookies={})
    metadata = {"chat_id": options.chat_id, "message_id": options.message_id}
    connection = json.loads(options.connection)
    headers, _cookies = asyncio.run(
        build_tool_server_headers(
            connection, request, user, server_id="file-agent", metadata=metadata
        )
    )
    return headers


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--header", action="append", default=[], help="NAME=VALUE, repeated")
    parser.add_argument("--connection", help="the tool server connection as Open WebUI stores it")
    parser.add_argument("--user", help="the chat's user: JSON with id, name, email, role")
    parser.add_argument("--session-token", help="the user's Open WebUI token (auth session)")
    parser.add_argument("--chat-id", help="the chat's id")
    parser.add_argument("--message-id", help="the assistant message's id")
    parser.add_argument("--tool", required=True)
    parser.add_argument("--args", default="{}", help="the tool's arguments, as JSON")
    parser.add_argument("--give-up-after", type=float, help="seconds, then the client leaves")
    parser.add_argument("--read-timeout", type=float, help="seconds, instead of Open WebUI's 300")
    options = parser.parse_args()
    headers = tool_server_headers(options) if options.connection else {}
    headers.update(header.split("=", 1) for header in options.header)
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
