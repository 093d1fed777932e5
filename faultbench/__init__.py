"""faultbench: how often is a training-failure diagnoser right?"""

from faultbench.diagnosis import DIAGNOSERS, Diagnoser, Diagnosis, get_diagnoser
from faultbench.evaluate import Report, RunResult, evaluate
from faultbench.faults import FAULTS, Condition, condition, condition_names
from faultbench.monitor import Monitor
from faultbench.run import Probe, Run
from faultbench.store import Store
from faultbench.tasks import TASKS, Task, get_task
from faultbench.trace import RunConfig, Trace

__all__ = [
    "DIAGNOSERS",
    "FAULTS",
    "TASKS",
    "Condition",
    "Diagnoser",
    "Diagnosis",
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
    "evaluate",
    "get_diagnoser",
    "get_task",
]
