"""serve-mcp over stdio: ``reset.seed`` sent as a decimal string (MCP Inspector's CLI sends every
argument as a string) starts the same episode as the integer; any other string is a tool error
naming the seed, and the session goes on."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from bundle_factory import TASK, make_notes_bundle
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parents[1]


def _text(result) -> str:
    return "\n".join(block.text for block in result.content)


@pytest.mark.timeout(90)
def test_a_decimal_string_seed_is_that_seed_and_other_strings_are_refused(tmp_path: Path) -> None:
    tasks = [{**TASK, "id": f"t{i}"} for i in range(5)]
    bundle = make_notes_bundle(tmp_path / "notes", tasks=tasks)
    argv = [sys.executable, "-m", "envgym.cli", "serve-mcp", str(bundle), "--sandbox", "inprocess"]
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(REPO))

    async def main() -> None:
        with open(tmp_path / "stderr.txt", "w") as errlog:
            async with Client(
                stdio_client(params, errlog=errlog), read_timeout_seconds=30
            ) as client:
                for seed in range(4):
                    as_int = await client.call_tool("reset", {"seed": seed})
                    as_str = await client.call_tool("reset", {"seed": str(seed)})
                    assert not as_int.is_error and not as_str.is_error, _text(as_str)
                    assert as_str.structured_content == as_int.structured_content
                for bad in ("7x", "-1", " 7", "1e3", "0x10", "9" * 30):
                    refused = await client.call_tool("reset", {"seed": bad})
                    assert refused.is_error and "`seed`" in _text(refused), (bad, _text(refused))
                again = await client.call_tool("reset", {"seed": "3"})
                assert not again.is_error

    anyio.run(main)
