"""``SearchQAEnv``: search-QA bundles as episodes whose search tools run on the full index.

Like the code interpreter's notebook (envgym/envs/code_interpreter/notebook.py), a sandbox wrapper
routes the bundle's ``search``/``open``/``find`` to a trusted built-in tool — here
:class:`envgym.tools.search.SearchTools` over the cached tantivy index of every Debian package — and
everything else (``submit_answer``, solutions, verifiers) to the bundle sandbox.  The host tool
is read-only and bounds its own inputs (docs/SEARCH.md), so it needs no jail; its errors become
tool errors the agent reads.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from envgym.bundle import Bundle, load_bundle
from envgym.bundle_env import BundleEnv
from envgym.sandbox import CallError, CallOutcome, Limits, Sandbox, ToolSpec, open_sandbox
from envgym.sandbox.routed import Handler, RoutedSandbox
from envgym.tools.search import SearchError, SearchTools

ROUTED = ("search", "open", "find")


class SearchSandbox(RoutedSandbox):
    """``search``/``open``/``find`` → the host index; everything else → the bundle sandbox."""

    backend = "search"

    def __init__(self, inner: Sandbox, tools: SearchTools) -> None:
        super().__init__(inner, {name: self._router(name) for name in ROUTED})
        self.tools = tools

    def describe_tools(self) -> list[ToolSpec]:
        specs = self.inner.describe_tools()
        missing = set(ROUTED) - {s.name for s in specs}
        if missing:
            raise ValueError(
                f"the bundle {self.bundle_dir.name} lacks the search tools {sorted(missing)}"
            )
        return specs

    def _router(self, name: str) -> Handler:
        # The host tools bound their own inputs and work (docs/SEARCH.md): no wall-clock limit.
        return lambda arguments, _timeout_s: self._search(name, arguments)

    def _search(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        started = time.perf_counter()
        try:
            value = getattr(self.tools, name)(**arguments)
        except (SearchError, TypeError) as exc:  # TypeError: arguments the schema let through oddly
            return CallOutcome(ok=False, error=CallError.EXCEPTION, message=str(exc),
                               duration_s=time.perf_counter() - started)  # fmt: skip
        return CallOutcome(ok=True, value=value, duration_s=time.perf_counter() - started)


class SearchQAEnv(BundleEnv):
    """Episodes over a search-QA bundle (default: the cached ``search-qa-v0`` bundle).

    Args:
        bundle: a bundle or its directory.
        search: the search tools episodes use (default: the full Debian index, built once).
        sandbox: backend of the bundle sandbox (submit_answer, solution, verifier).
        **kwargs: passed to :class:`BundleEnv` (task, parser, context, budgets, ...).
    """

    def __init__(
        self,
        bundle: Bundle | Path | str | None = None,
        *,
        search: SearchTools | None = None,
        sandbox: str | Sandbox = "bwrap",
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> None:
        if bundle is None:
            from envgym.envs.search_qa.build import default_bundle_dir

            bundle = default_bundle_dir()
        loaded = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
        if search is None:
            from envgym.tools.search.build import default_index

            search = SearchTools(default_index())
        inner = (
            sandbox
            if isinstance(sandbox, Sandbox)
            else open_sandbox(loaded.root, backend=sandbox, limits=limits)
        )
        self.search_box = SearchSandbox(inner, search)
        try:
            super().__init__(loaded, sandbox=self.search_box, **kwargs)
        except BaseException:
            self.search_box.close()
            raise
