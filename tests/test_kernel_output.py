"""Output folding of the python tool: exact text for tiny inputs (no kernel needed)."""

from __future__ import annotations

import base64
import struct
import sys

from envgym.tools.python_kernel.output import OutputCollector, render_data, shorten_traceback


def _png(width: int, height: int) -> str:
    header = (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", 13)
        + b"IHDR"
        + struct.pack(">II", width, height)
        + b"\x08\x06\x00\x00\x00"
    )
    return base64.b64encode(header + b"\x00" * 1000).decode()


def test_streams_and_results_are_kept_in_order() -> None:
    out = OutputCollector(max_chars=1000, flood_bytes=10_000)
    out.add_message("stream", {"name": "stdout", "text": "a\n"})
    out.add_message("stream", {"name": "stderr", "text": "b\n"})
    out.add_message("execute_result", {"data": {"text/plain": "42"}})
    assert out.render() == "a\nb\n42\n"


def test_long_output_keeps_head_and_tail_and_says_how_much_was_cut() -> None:
    out = OutputCollector(max_chars=200, flood_bytes=10**9)
    out.add_text("H" * 150)
    out.add_text("x" * 1000)
    out.add_text("T" * 100)
    text = out.render()
    assert text == "H" * 100 + "\n[... 1050 characters of output omitted ...]\n" + "T" * 100
    assert not out.flooded


def test_flood_is_flagged_past_the_threshold() -> None:
    out = OutputCollector(max_chars=200, flood_bytes=500)
    out.add_text("y" * 501)
    assert out.flooded


def test_images_and_html_become_placeholders() -> None:
    png = _png(640, 480)
    assert render_data({"image/png": png, "text/plain": "<Figure size 640x480 with 1 Axes>"}) == (
        f"<image/png image 640x480, {len(png) * 3 // 4 / 1024:.1f} KiB: not shown>"
    )
    assert (
        render_data({"text/html": "<table>" + "x" * 93 + "</table>"})
        == "<HTML output, 108 characters: not shown>"
    )
    # A DataFrame carries text/plain beside its HTML: the model gets the plain text.
    assert render_data({"text/html": "<table/>", "text/plain": "   a\n0  1"}) == "   a\n0  1"


def test_traceback_is_plain_short_and_ends_with_the_exception() -> None:
    site = f"{sys.prefix}/lib/python3.11/site-packages/"
    lines = ["\x1b[31mTraceback (most recent call last):\n", "  Cell In[3], line 1\n    f()\n"]
    lines += [f"  File {site}lib/m.py:{i} in g\n    step{i}()\n" for i in range(10)]
    lines += ["ValueError: bad\n"]
    text = shorten_traceback(lines, "ValueError", "bad", max_lines=8)
    assert text.splitlines() == [
        "Traceback (most recent call last):",
        "  Cell In[3], line 1",
        "    f()",
        "  ... (17 lines omitted)",
        "    step8()",
        "  File lib/m.py:9 in g",
        "    step9()",
        "ValueError: bad",
    ]
    assert "\x1b" not in text and site not in text


def test_error_message_follows_the_output() -> None:
    out = OutputCollector(max_chars=1000, flood_bytes=10_000)
    out.add_message("stream", {"name": "stdout", "text": "before"})
    out.add_message(
        "error",
        {
            "ename": "ZeroDivisionError",
            "evalue": "division by zero",
            "traceback": [
                "Traceback (most recent call last):\n",
                "  Cell In[1], line 1\n    1/0\n",
                "ZeroDivisionError: division by zero\n",
            ],
        },
    )
    assert out.render() == (
        "before\nTraceback (most recent call last):\n  Cell In[1], line 1\n    1/0\nZeroDivisionError: division by zero"
    )
    assert out.error is not None and out.error.ename == "ZeroDivisionError"


def test_clear_output_drops_what_came_before() -> None:
    out = OutputCollector(max_chars=1000, flood_bytes=10_000)
    out.add_text("progress 10%\n")
    out.add_message("clear_output", {"wait": False})
    out.add_text("done\n")
    assert out.render() == "done\n"
