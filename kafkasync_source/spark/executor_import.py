"""What Spark ships to the executors is rebuilt there only once kafkasync imports, so that an
executor whose Python lacks kafkasync says so plainly.

Spark pickles the data source and its reader (cloudpickle) into each read task. An executor
whose Python cannot import ``kafkasync_source`` failed inside Spark's deserializer, with a
traceback through ``read_command`` and ``cloudpickle.loads`` that ends in ``ModuleNotFoundError:
No module named 'kafkasync_source'`` (seen on a standalone cluster whose executors were given
an environment without it): it reads as a pickling failure, and names neither the Python that
lacks it nor what to ship. Objects of :class:`RebuiltAfterImport` pickle as a call of
:func:`rebuild` with their state as bytes; :func:`rebuild` is pickled *by value* (its code
travels in the task, see ``register_pickle_by_value`` below), so it runs on the executor before
anything of kafkasync is needed, imports kafkasync, and when that fails raises an error that
says what is missing, in which interpreter, and how to ship it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from pyspark import cloudpickle

RANGE_READER_MODULE = "kafkasync_source.executor.range_reader"
"""What a reader's ``read()`` runs: the readers' :attr:`RebuiltAfterImport.EXECUTOR_MODULES`."""


def rebuild(module: str, name: str, state: bytes) -> Any:
    """An object of class ``module.name`` with the pickled ``state``, on an executor."""
    try:
        cls = getattr(importlib.import_module(module), name)
        for needed in getattr(cls, "EXECUTOR_MODULES", ()):
            importlib.import_module(needed)
    except ImportError as err:
        raise ImportError(
            f"kafkasync cannot be imported on this executor: {err}. The executor's Python "
            f"({sys.executable}, Python {sys.version.split()[0]}) needs kafkasync and the packages it "
            "imports there (confluent-kafka, pyarrow, numpy, msgspec, cryptography). Ship them with the "
            "application (spark.archives with a venv-pack'ed environment, the same one the driver "
            "runs) or install them on every node; see kafkasync's Deployment page, 'An executor "
            "cannot import kafkasync'."
        ) from err
    instance = cls.__new__(cls)
    restored = cloudpickle.loads(state)
    if hasattr(instance, "__setstate__"):
        instance.__setstate__(restored)
    elif restored is not None:
        instance.__dict__.update(restored)
    return instance


class RebuiltAfterImport:
    """Mixed into the classes Spark pickles into read tasks (the data source and its readers)."""

    EXECUTOR_MODULES: tuple[str, ...] = ()
    """Modules only an executor's task needs (the range reader): imported where :func:`rebuild`
    lands the object, so that a failure there says what is missing as plainly, and not where
    the class's module is imported. Spark's Python source runner, a new process for every
    streaming query, imports the data source's module to unpickle it and never reads a range."""

    def __reduce__(self) -> tuple[Any, ...]:
        getstate = getattr(self, "__getstate__", None)
        state = getstate() if getstate is not None else self.__dict__
        cls = type(self)
        return rebuild, (cls.__module__, cls.__qualname__, cloudpickle.dumps(state))


# rebuild() must reach the executor as code, not as a reference to this module, which is what
# the executor may lack.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
