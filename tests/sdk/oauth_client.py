"""An MCP client that becomes a user the MCP authorization specification's way, with the
official MCP Python SDK (2.x): it calls file-agent without a token, follows the 401's
`resource_metadata` to the protected-resource metadata, finds the issuer there, reads the
issuer's metadata, gets an access token by the client-credentials grant for the resource
(RFC 8707 `resource`), and calls again with it. The SDK does all of that itself
(`ClientCredentialsOAuthProvider`); this script only lists the tools and runs one call.

Usage: target/test-python/bin/python3 tests/sdk/oauth_client.py http://127.0.0.1:8000/mcp \
           ISSUER CLIENT_ID CLIENT_SECRET SCOPE

Prints the tools and the result of run_python (`print(6 * 7)`); exits non-zero on any failure.
Run by the integration test `identity::an_mcp_client_signs_in_at_a_real_issuer_and_becomes_its_user`.
"""

import asyncio
import sys

from mcp import ClientSession
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken


class MemoryStorage(TokenStorage):
    """Tokens kept for this run only."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


async def main(url: str, issuer: str, client_id: str, secret: str, scope: str) -> None:
    provider = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=MemoryStorage(),
        client_id=client_id,
        client_secret=secret,
        scope=scope,
        issuer=issuer,
    )
    async with create_mcp_http_client(auth=provider) as http_client, streamable_http_client(
        url, http_client=http_client
    ) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await asyncio.wait_for(session.initialize(), timeout=20)
            tools = await session.list_tools()
            print("tools:", ",".join(sorted(tool.name for tool in tools.tools)))
            result = await session.call_tool("run_python", {"code": "print(6 * 7)"})
            text = "".join(getattr(item, "text", "") for item in result.content)
            if result.is_error:
                raise SystemExit("run_python failed: " + text)
            print("result:", text.split("```")[1].strip())


if __name__ == "__main__":
    if len(sys.argv) != 6:
        raise SystemExit(__doc__)
    asyncio.run(main(*sys.argv[1:]))
