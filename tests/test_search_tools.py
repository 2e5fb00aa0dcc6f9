"""envgym/tools/search: ranking, paging and find over a small hermetic corpus, and every bad input.

One index (45 packages) is built per module into a temporary envgym cache through the same
``build_at`` the real corpus uses.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from search_corpus import dumpavail_text

from envgym.tools.search import SearchError, SearchTools
from envgym.tools.search.build import build_at
from envgym.tools.search.debian import parse_packages
from envgym.tools.search.find import MAX_MATCHES, MAX_PATTERN
from envgym.tools.search.index import Index
from envgym.tools.search.pages import PAGE_CHARS, page_of, paginate
from envgym.tools.search.tools import MAX_K, MAX_QUERY_CHARS, MAX_QUERY_TERMS


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> SearchTools:
    root = tmp_path_factory.mktemp("search-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENVGYM_CACHE", str(root))
        folder = build_at(
            root / "search" / "fixture", parse_packages(dumpavail_text().splitlines())
        )
    return SearchTools(Index(folder))


# --- search -------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_search_ranks_the_described_package_first(tools: SearchTools) -> None:
    hits = tools.search("zebrafish microscopy", k=3)
    assert hits[0]["id"] == "zebrafish-viewer"
    assert (
        hits[0]["title"] == "zebrafish-viewer: interactive viewer for zebrafish microscopy images"
    )
    assert "zebrafish" in hits[0]["snippet"].lower()
    assert set(hits[0]) == {"id", "title", "score", "snippet"}


@pytest.mark.timeout(30)
def test_search_returns_at_most_k_best_first(tools: SearchTools) -> None:
    hits = tools.search("filler package", k=7)
    assert len(hits) == 7
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "query", ["http:client", 'unbalanced "quote', "title:(x OR", "a AND NOT b", "[1 TO 3]", "*"]
)
def test_query_syntax_in_agent_text_is_just_words(tools: SearchTools, query: str) -> None:
    """tantivy's query language must not leak: these are searched as words (or rejected cleanly)."""
    try:
        tools.search(query)
    except SearchError as exc:
        assert "no searchable words" in str(exc)


@pytest.mark.timeout(30)
def test_field_syntax_does_not_restrict_the_search(tools: SearchTools) -> None:
    assert tools.search("http:client", k=1)[0]["id"] == "python3-httpkit"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("query", "k", "message"),
    [
        ("", 5, "query is empty"),
        ("   \n\t", 5, "query is empty"),
        (
            "x" * (MAX_QUERY_CHARS + 1),
            5,
            f"{MAX_QUERY_CHARS + 1} characters; the limit is {MAX_QUERY_CHARS}",
        ),
        (
            " ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 1)),
            5,
            f"the limit is {MAX_QUERY_TERMS}",
        ),
        ("!!! ???", 5, "no searchable words"),
        ("game", 0, f"k must be an integer from 1 to {MAX_K}, got 0"),
        ("game", MAX_K + 1, f"got {MAX_K + 1}"),
        ("game", "3", "got '3'"),
        ("game", True, "got True"),
    ],
)
def test_bad_search_input_names_what_was_wrong(
    tools: SearchTools, query: str, k: object, message: str
) -> None:
    with pytest.raises(SearchError, match="^search: ") as info:
        tools.search(query, k)  # type: ignore[arg-type]
    assert message in str(info.value)


# --- open ---------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_open_pages_a_long_document_without_losing_text(tools: SearchTools) -> None:
    first = tools.open("bigprovides")
    assert (
        first["pages"] > 1
        and first["page"] == 1
        and first["text"].startswith("Package: bigprovides")
    )
    text = "".join(tools.open("bigprovides", p)["text"] for p in range(1, first["pages"] + 1))
    assert "virtual-feature-0," in text and "virtual-feature-599" in text
    assert all(
        len(tools.open("bigprovides", p)["text"]) <= PAGE_CHARS
        for p in range(1, first["pages"] + 1)
    )


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("doc_id", "page", "message"),
    [
        ("no-such-package", 1, "no document with id 'no-such-package'"),
        ("", 1, "the id is empty"),
        ("x" * 500, 1, "the id is 500 characters"),
        ("spacerocks", 2, "page 2 is out of range; document 'spacerocks' has pages 1 to 1"),
        ("spacerocks", 0, "page 0 is out of range"),
        ("spacerocks", -3, "page -3 is out of range"),
        ("spacerocks", "2", "page must be an integer, got '2'"),
    ],
)
def test_bad_open_input_names_what_was_wrong(
    tools: SearchTools, doc_id: str, page: object, message: str
) -> None:
    with pytest.raises(SearchError, match="^open: ") as info:
        tools.open(doc_id, page)  # type: ignore[arg-type]
    assert message in str(info.value)


@pytest.mark.timeout(30)
def test_ids_are_exact_not_searched(tools: SearchTools) -> None:
    """``open`` looks an id up as one exact term, never through the analyzer."""
    with pytest.raises(SearchError, match="no document"):
        tools.open("Spacerocks")
    with pytest.raises(SearchError, match="no document"):
        tools.open("spacerocks extra")


# --- find ---------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_find_reports_page_line_and_context(tools: SearchTools) -> None:
    found = tools.find("zebrafish-viewer", r"libpng[\w-]*")
    assert [m["match"] for m in found["matches"]] == ["libpng16-16", "libpng-dev"]
    line = next(
        i
        for i, t in enumerate(tools.open("zebrafish-viewer")["text"].splitlines(), 1)
        if "Depends" in t
    )
    assert {m["line"] for m in found["matches"]} == {line}
    assert all(m["page"] == 1 and m["match"] in m["context"] for m in found["matches"])
    assert found["truncated"] is False


@pytest.mark.timeout(30)
def test_find_is_case_insensitive_and_pages_are_right(tools: SearchTools) -> None:
    assert tools.find("spacerocks", "ARCADE")["matches"][0]["match"] == "arcade"
    pages = tools.open("bigprovides")["pages"]
    last = tools.find("bigprovides", r"virtual-feature-599\b")["matches"]
    assert len(last) == 1 and last[0]["page"] == pages


@pytest.mark.timeout(30)
def test_find_caps_matches_and_says_so(tools: SearchTools) -> None:
    found = tools.find("bigprovides", r"virtual-feature-\d+")
    assert len(found["matches"]) == MAX_MATCHES and found["truncated"] is True


@pytest.mark.timeout(30)
def test_find_skips_empty_matches(tools: SearchTools) -> None:
    assert tools.find("spacerocks", "q*")["matches"] == []


@pytest.mark.timeout(20)
@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)*b", r"(a*)*b", r"(.*a){20}"])
def test_exploding_regexes_finish(tools: SearchTools, pattern: str) -> None:
    """On a 3,000-``a`` line these take exponential time under a backtracking engine (``re``);
    RE2 is linear, so they return — the timeout is what fails if find ever backtracks."""
    result = tools.find("aaaa", pattern)
    assert isinstance(result["matches"], list)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("", "the pattern is empty"),
        (
            "a" * (MAX_PATTERN + 1),
            f"the pattern is {MAX_PATTERN + 1} characters; the limit is {MAX_PATTERN}",
        ),
        ("(unclosed", "invalid pattern '(unclosed': missing )"),
        (r"(a)\1", "invalid pattern"),
        ("(?<=a)b", "no backreferences or lookaround"),
        ("a{5000}", "invalid repetition size"),
    ],
)
def test_bad_find_input_names_what_was_wrong(
    tools: SearchTools, pattern: str, message: str
) -> None:
    with pytest.raises(SearchError, match="^find: ") as info:
        tools.find("spacerocks", pattern)
    assert message in str(info.value)


@pytest.mark.timeout(30)
def test_find_on_unknown_id_is_an_id_error(tools: SearchTools) -> None:
    with pytest.raises(SearchError, match="^find: no document with id 'nope'"):
        tools.find("nope", "a")


# --- pages (property) ---------------------------------------------------------------------


@pytest.mark.timeout(60)
@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("ab \n"), max_size=400), st.integers(min_value=1, max_value=50)
)
def test_paginate_keeps_every_character_and_bounds_pages(text: str, size: int) -> None:
    pages = paginate(text, size)
    assert "".join(pages) == text
    assert pages and all(len(p) <= size for p in pages)
    assert all(p for p in pages) or text == ""
    for offset in range(len(text)):
        number = page_of(pages, offset)
        start = sum(len(p) for p in pages[: number - 1])
        assert start <= offset < start + len(pages[number - 1])
