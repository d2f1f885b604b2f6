"""The store's journaled operations (store/operations.py): every kind is known to a journal's reader however the
store was opened."""

import subprocess
import sys

from benchd.store.operations import KIND_MODULES, Operation, import_kinds
from tests.helpers import ROOT

READ = """
import sys
from benchd.store.database import Store
from benchd.store.operations import Operation
found = Operation.read({"op": "change_point_confirmation", "id": "c1", "confirmation": {"verdict": "confirmed"},
                        "matrix_id": None})
print(type(found).__name__, "benchd.store.history" in sys.modules)
"""


def test_a_process_that_opens_the_store_alone_reads_every_kind_of_operation():
    """A fresh process that imports only the store (no history, no daemon) reads the history's operations from its
    journal, where it once set them aside as unknown."""
    done = subprocess.run([sys.executable, "-c", READ], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ChangePointConfirmation", "True"]


def test_every_module_that_defines_operations_is_imported_before_a_read():
    """A module of the store that subclasses Operation is listed in KIND_MODULES (or is operations.py itself)."""
    import_kinds()
    defining = {kind.__module__ for kind in Operation.kinds.values()} - {"benchd.store.operations"}
    sources = {f"benchd.store.{path.stem}" for path in (ROOT / "src" / "benchd" / "store").glob("*.py")
               if "(Operation):" in path.read_text()}
    assert set(defining) <= set(KIND_MODULES) and set(sources) <= set(KIND_MODULES) | {"benchd.store.operations"}
