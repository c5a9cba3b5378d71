"""The LangGraph store with its values encrypted. Upstream's stores keep values as JSON and take
no serializer, so this wrapper seals each value on the way in and opens it on the way out; the
namespace and key stay readable (the namespace is the customer's email: erasing the customer
deletes those rows).
A search's `filter` cannot see inside a sealed value; the app filters on none."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.store.base import BaseStore, Item, Op, PutOp, Result

from refunds.persistence.encryption import seal, unseal


class SealedStore(BaseStore):
    """The store as the app sees it; with no keys (`serde` None) values go in as they are, and
    one sealed under a key read back says which setting is missing, not a KeyError later."""

    def __init__(self, inner: Any, serde: EncryptedSerializer | None) -> None:
        self.inner = inner
        self.serde = serde
        self.conn = inner.conn  # closed, and emptied by the tests, as the inner store's
        # Its tables are made by migrate (through the inner store), never by a worker starting.

    def _sealed(self, ops: Iterable[Op]) -> list[Op]:
        if self.serde is None:
            return list(ops)
        serde = self.serde
        return [
            op._replace(value=seal(serde, op.value))
            if isinstance(op, PutOp) and op.value is not None
            else op
            for op in ops
        ]

    def _opened(self, results: list[Result]) -> list[Result]:
        for result in results:
            for item in result if isinstance(result, list) else [result]:
                if isinstance(item, Item):
                    item.value = unseal(self.serde, item.value)
        return results

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._opened(self.inner.batch(self._sealed(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self._opened(await self.inner.abatch(self._sealed(ops)))
