"""Which thread runs a function is said where it is defined: every function of payorch whose first
parameter (after `self`) is the connection `conn` runs on the database's asyncio thread and is
marked `@on_database_thread`, and only those are (`storage.database`). `Database` refuses a unit of
payorch's that is not marked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from payorch.storage.database import Connection, Database

PACKAGE = Path(__file__).resolve().parent.parent / "payorch"


def _functions() -> list[tuple[str, bool, bool]]:
    """(where, takes `conn` first, marked) of every function defined in payorch."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            arguments = node.args.posonlyargs + node.args.args
            if arguments and arguments[0].arg in ("self", "cls"):
                arguments = arguments[1:]
            takes_conn = bool(arguments) and arguments[0].arg == "conn"
            marked = any(
                isinstance(d, ast.Name) and d.id == "on_database_thread" for d in node.decorator_list
            )
            found.append(
                (f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}", takes_conn, marked)
            )
    return found


def test_every_function_taking_a_connection_first_is_marked_as_running_on_the_database_thread() -> None:
    functions = _functions()
    assert sum(takes_conn for _, takes_conn, _ in functions) > 100  # the scan sees the storage layer
    assert [where for where, takes_conn, marked in functions if takes_conn and not marked] == []


def test_only_functions_taking_a_connection_first_are_marked() -> None:
    assert [where for where, takes_conn, marked in _functions() if marked and not takes_conn] == []


async def test_the_database_refuses_a_unit_of_payorchs_that_is_not_marked(db: Database) -> None:
    async def unmarked(conn: Connection) -> int:
        return 1

    unmarked.__module__ = "payorch.storage.example"
    with pytest.raises(TypeError, match="on_database_thread"):
        await db.transaction(unmarked)
    with pytest.raises(TypeError, match="on_database_thread"):
        await db.autocommit(unmarked)
    with pytest.raises(TypeError, match="on_database_thread"):
        await db.snapshot(unmarked)
