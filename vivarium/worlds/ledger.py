"""Integer scrip per account, moved only by checked transfers: the ecology world's money.

The ledger knows accounts and amounts, nothing of the world that uses it: ``transfer`` checks and
moves in the same critical section, so balances never go negative and the total never changes,
whichever threads call it. A refused transfer is an ``ActionError`` (``LedgerError``), so the
world records it as the action's outcome (``insufficient scrip: need 5, have 2``) and the run
goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from vivarium.errors import ConfigError
from vivarium.worlds.registry import ActionError

__all__ = ["LEDGER_RECENT", "InsufficientScrip", "Ledger", "LedgerError"]

LEDGER_RECENT = 50  # transfers kept in ``Ledger.recent`` (and in checkpoints), for debugging


class LedgerError(ActionError):
    """A transfer that cannot happen (unknown account, bad amount); nothing moved."""


class InsufficientScrip(LedgerError):
    """The payer has less scrip than the transfer needs; nothing moved.

    Attributes:
        need: The amount asked for.
        have: The payer's balance.
    """

    def __init__(self, need: int, have: int) -> None:
        """Say how much was needed and how much there was, in one line."""
        super().__init__(f"insufficient scrip: need {need}, have {have}")
        self.need, self.have = need, have


class Ledger:
    """Integer scrip per account. Every move is one checked transfer under one lock.

    Attributes:
        transfers: How many transfers have been made (a version number for the balances).
        recent: The last ``LEDGER_RECENT`` transfers, ``{seq, src, dst, amount, reason}``.
    """

    def __init__(self, balances: Mapping[str, int]) -> None:
        """Open one account per key of ``balances`` with its starting amount.

        Raises:
            ConfigError: A balance is not an int >= 0.
        """
        for account, amount in balances.items():
            if type(amount) is not int or amount < 0:
                raise ConfigError(f"ledger: balance of {account!r} must be an int >= 0")
        self._balances = dict(balances)
        self._lock = threading.Lock()
        self.transfers = 0
        self.recent: list[dict[str, Any]] = []  # the last LEDGER_RECENT transfers, for debugging

    def __contains__(self, account: object) -> bool:
        """Whether ``account`` has an account here."""
        return account in self._balances

    def balance(self, account: str) -> int:
        """The scrip ``account`` holds.

        Raises:
            LedgerError: There is no such account.
        """
        with self._lock:
            if account not in self._balances:
                raise LedgerError(f"not found: no account {account!r}")
            return self._balances[account]

    def balances(self) -> dict[str, int]:
        """Every account's balance (a copy)."""
        with self._lock:
            return dict(self._balances)

    def total(self) -> int:
        """The scrip in all accounts: the same after any number of transfers."""
        with self._lock:
            return sum(self._balances.values())

    def transfer(self, src: str, dst: str, amount: int, reason: str) -> int:
        """Move ``amount`` from ``src`` to ``dst``, or nothing.

        Args:
            src: The paying account.
            dst: The receiving account.
            amount: A positive integer.
            reason: Why, kept in ``recent`` (e.g. ``invoke a1.run``).

        Returns:
            ``src``'s new balance.

        Raises:
            InsufficientScrip: ``src`` holds less than ``amount``
                (``insufficient scrip: need N, have M``).
            LedgerError: An unknown account, a bad amount, or ``src == dst``.
        """
        if type(amount) is not int or amount <= 0:
            raise LedgerError(f"amount must be a positive integer, got {amount!r}")
        if src == dst:
            raise LedgerError(f"cannot transfer from {src!r} to itself")
        with self._lock:
            for account in (src, dst):
                if account not in self._balances:
                    raise LedgerError(f"not found: no account {account!r}")
            have = self._balances[src]
            if have < amount:
                raise InsufficientScrip(amount, have)
            self._balances[src] = have - amount
            self._balances[dst] += amount
            self.transfers += 1
            self.recent.append(self._record(self.transfers, src, dst, amount, reason))
            if len(self.recent) > LEDGER_RECENT:
                del self.recent[0]
            return self._balances[src]

    @staticmethod
    def _record(seq: int, src: str, dst: str, amount: int, reason: str) -> dict[str, Any]:
        return {"seq": seq, "src": src, "dst": dst, "amount": amount, "reason": reason}

    def snapshot(self) -> dict[str, Any]:
        """The ledger's state as JSON-like data, for a checkpoint (see ``restore``)."""
        with self._lock:
            return {
                "balances": dict(self._balances),
                "transfers": self.transfers,
                "recent": [dict(r) for r in self.recent],
            }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Put back the state a ``snapshot`` took."""
        with self._lock:
            self._balances = {k: int(v) for k, v in state["balances"].items()}
            self.transfers = int(state["transfers"])
            self.recent = [
                self._record(r["seq"], r["src"], r["dst"], r["amount"], r["reason"])
                for r in state["recent"]
            ]
