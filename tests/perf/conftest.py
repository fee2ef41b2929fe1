"""The perf tests calibrate the machine ``host`` once per session, in a cache of their own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _host_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NCD_CACHE_DIR", str(tmp_path_factory.mktemp("ncd-cache")))
        yield
