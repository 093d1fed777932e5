"""faultbench: how often is a training-failure diagnoser right?

Every public name is imported on first use (PEP 562), so ``import faultbench``
and ``faultbench --help`` load neither torch nor scikit-learn, pandas, scipy,
matplotlib or dask, and ``from faultbench import Monitor`` loads torch alone.
"""

from __future__ import annotations

import importlib
from pkgutil import extend_path
from typing import TYPE_CHECKING, Any

# The install is a link tree on sys.path (setuptools' strict editable mode, see
# the Makefile): a regular package there always wins over a stray `faultbench/`
# folder in the working directory. Imported from the root of a source checkout,
# this folder comes first instead, and it lacks the shipped data sets and
# diagnosers (installed as faultbench.datasets and .diagnosers from datasets/
# and diagnosers/): extend_path adds the installed package's folder to the search.
__path__ = extend_path(__path__, __name__)

#: public name -> the module that defines it
_EXPORTS = {
    "DIAGNOSERS": "faultbench.scoring.diagnosis",
    "Diagnoser": "faultbench.scoring.diagnosis",
    "Diagnosis": "faultbench.scoring.diagnosis",
    "get_diagnoser": "faultbench.scoring.diagnosis",
    "Report": "faultbench.scoring.evaluate",
    "RunResult": "faultbench.scoring.evaluate",
    "evaluate": "faultbench.scoring.evaluate",
    "FAULTS": "faultbench.faults.fault",
    "Condition": "faultbench.faults.fault",
    "condition": "faultbench.faults.fault",
    "condition_names": "faultbench.faults.fault",
    "Monitor": "faultbench.training.monitor",
    "Probe": "faultbench.scoring.run",
    "Run": "faultbench.scoring.run",
    "Store": "faultbench.storage.store",
    "TASKS": "faultbench.tasks.task",
    "Task": "faultbench.tasks.task",
    "get_task": "faultbench.tasks.task",
    "RunConfig": "faultbench.training.trace",
    "Trace": "faultbench.training.trace",
    "doctor": "faultbench.tools.doctor",
    "FaultbenchError": "faultbench.core.errors",
}

__all__ = [
    "DIAGNOSERS",
    "FAULTS",
    "TASKS",
    "Condition",
    "Diagnoser",
    "Diagnosis",
    "FaultbenchError",
    "Monitor",
    "Probe",
    "Report",
    "Run",
    "RunConfig",
    "RunResult",
    "Store",
    "Task",
    "Trace",
    "condition",
    "condition_names",
    "doctor",
    "evaluate",
    "get_diagnoser",
    "get_task",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'faultbench' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # what type checkers and editors see
    from faultbench.core.errors import FaultbenchError
    from faultbench.faults.fault import FAULTS, Condition, condition, condition_names
    from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnoser, Diagnosis, get_diagnoser
    from faultbench.scoring.evaluate import Report, RunResult, evaluate
    from faultbench.scoring.run import Probe, Run
    from faultbench.storage.store import Store
    from faultbench.tasks.task import TASKS, Task, get_task
    from faultbench.tools.doctor import doctor
    from faultbench.training.monitor import Monitor
    from faultbench.training.trace import RunConfig, Trace
